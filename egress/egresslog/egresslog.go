// Package egresslog keeps the egress logs of sandboxes: the proxy's
// entries, batched into the store (store.EgressLog) off the proxy's path,
// read back by the API (reins sandbox egress, --follow) and by the run
// engine (a run's egress events).
//
// The proxy never waits on the database: Add queues an entry and returns.
// A queue that is full (the store far behind) drops entries, counts them,
// and writes an entry saying how many were lost, so a gap is never silent.
package egresslog

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/store"
)

// Bounds of the queue between the proxy and the store.
const (
	queueSize = 8192
	batchSize = 512
	batchWait = 50 * time.Millisecond
)

type queued struct {
	tenant string
	e      egress.Entry
}

// Log batches entries into st. Its methods are safe for concurrent use.
type Log struct {
	st  store.EgressLog
	log *slog.Logger
	q   chan queued

	mu      sync.Mutex
	lost    map[string]lostCount // sandbox → entries dropped, not yet told
	gone    map[string]bool      // sandboxes removed (Delete), for Wait
	changed chan struct{}        // closed and replaced at each write
	flushes chan chan struct{}

	done chan struct{}
	wg   sync.WaitGroup
}

type lostCount struct {
	tenant string
	n      int
}

// New starts a Log over st; Close stops it.
func New(st store.EgressLog, logger *slog.Logger) *Log {
	if logger == nil {
		logger = slog.Default()
	}
	l := &Log{st: st, log: logger, q: make(chan queued, queueSize), lost: map[string]lostCount{}, gone: map[string]bool{},
		changed: make(chan struct{}), flushes: make(chan chan struct{}), done: make(chan struct{})}
	l.wg.Add(1)
	go l.write()
	return l
}

// Add queues an entry of tenant's sandbox. It never blocks.
func (l *Log) Add(tenant string, e egress.Entry) {
	select {
	case l.q <- queued{tenant, e}:
	default:
		l.mu.Lock()
		c := l.lost[e.Sandbox]
		c.tenant, c.n = tenant, c.n+1
		l.lost[e.Sandbox] = c
		l.mu.Unlock()
	}
}

func (l *Log) write() {
	defer l.wg.Done()
	var batch []queued
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var waiters []chan struct{}
	flush := func() {
		batch = append(batch, l.takeLost()...)
		if len(batch) > 0 {
			l.store(batch)
			batch = batch[:0]
			l.mu.Lock()
			close(l.changed)
			l.changed = make(chan struct{})
			l.mu.Unlock()
		}
		for _, w := range waiters {
			close(w)
		}
		waiters = nil
	}
	for {
		select {
		case q := <-l.q:
			if len(batch) == 0 {
				timer.Reset(batchWait)
			}
			batch = append(batch, q)
			if len(batch) >= batchSize {
				flush()
			}
		case <-timer.C:
			flush()
		case w := <-l.flushes:
			// Take what is queued now: a flush covers every Add before it.
			for n := len(l.q); n > 0; n-- {
				batch = append(batch, <-l.q)
			}
			waiters = append(waiters, w)
			flush()
		case <-l.done:
			for n := len(l.q); n > 0; n-- {
				batch = append(batch, <-l.q)
			}
			flush()
			return
		}
	}
}

// takeLost turns counts of dropped entries into entries that say so.
func (l *Log) takeLost() []queued {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []queued
	for sb, c := range l.lost {
		out = append(out, queued{c.tenant, egress.Entry{Time: time.Now(), Sandbox: sb, Proto: "log",
			Rule: "log", Note: fmt.Sprintf("%d entries were lost: the log could not keep up", c.n)}})
	}
	clear(l.lost)
	return out
}

// store writes a batch, one transaction per tenant.
func (l *Log) store(batch []queued) {
	by := map[string][]egress.Entry{}
	var order []string
	for _, q := range batch {
		if _, ok := by[q.tenant]; !ok {
			order = append(order, q.tenant)
		}
		by[q.tenant] = append(by[q.tenant], q.e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, t := range order {
		if err := l.st.AppendEgress(ctx, t, by[t]); err != nil {
			l.log.Error("writing the egress log", "tenant", t, "entries", len(by[t]), "err", err)
		}
	}
}

// Flush returns once every entry added before it is stored.
func (l *Log) Flush(ctx context.Context) error {
	w := make(chan struct{})
	select {
	case l.flushes <- w:
	case <-l.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-w:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Egress returns a sandbox's entries after afterSeq (tenant "" sees all),
// with what was added until now.
func (l *Log) Egress(ctx context.Context, tenant, sandbox string, afterSeq int64, limit int) ([]store.EgressRecord, error) {
	if err := l.Flush(ctx); err != nil {
		return nil, err
	}
	return l.st.ListEgress(ctx, tenant, sandbox, afterSeq, limit)
}

// Wait returns nil when an entry of sandbox past afterSeq exists,
// errdefs.ErrNotFound once the sandbox is removed (Delete), or ctx's
// error.
func (l *Log) Wait(ctx context.Context, sandbox string, afterSeq int64) error {
	for {
		l.mu.Lock()
		ch, gone := l.changed, l.gone[sandbox]
		l.mu.Unlock()
		if gone {
			return fmt.Errorf("sandbox %s was removed: %w", sandbox, errdefs.ErrNotFound)
		}
		recs, err := l.st.ListEgress(ctx, "", sandbox, afterSeq, 1)
		if err != nil || len(recs) > 0 {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Since returns a sandbox's entries after afterSeq and the seq of the last
// one, for a run's events.
func (l *Log) Since(ctx context.Context, sandbox string, afterSeq int64) ([]egress.Entry, int64, error) {
	recs, err := l.Egress(ctx, "", sandbox, afterSeq, store.MaxEgressPerSandbox)
	if err != nil || len(recs) == 0 {
		return nil, afterSeq, err
	}
	out := make([]egress.Entry, len(recs))
	for i, r := range recs {
		out[i] = r.Entry
	}
	return out, recs[len(recs)-1].Seq, nil
}

// Delete removes a sandbox's log (when the sandbox is forgotten).
func (l *Log) Delete(ctx context.Context, sandbox string) error {
	if err := l.Flush(ctx); err != nil {
		return err
	}
	l.mu.Lock()
	if len(l.gone) >= maxGone {
		clear(l.gone) // a follower of a long-removed sandbox then waits on its ctx
	}
	l.gone[sandbox] = true
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
	return l.st.DeleteEgress(ctx, sandbox)
}

// maxGone bounds the memory of removed sandboxes.
const maxGone = 10000

// Close stores what is queued and stops.
func (l *Log) Close() {
	select {
	case <-l.done:
		return
	default:
	}
	close(l.done)
	l.wg.Wait()
}
