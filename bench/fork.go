package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/manager"
	"github.com/reinsdev/reins/sandbox/workspace"
)

// fork: Fork ×n of a running busybox sandbox holding 16 files of 64 KiB
// (one save of its workspace, then n sandboxes booted on it, each with
// its own disk from the pool, its own restore), beside n creates of
// busybox by the same manager with the same parallelism (the same boots
// without the save and the restores), round by round. The manager keeps
// n+2 disks ready, as a service that forks would.
// forkBound is manager.Fork's parallelism (forkParallel), which the
// creates of the baseline share.
const forkBound = 10

func (b *bench) fork(n, rounds int) error {
	phases := &forkPhases{d: map[string][]time.Duration{}}
	ws, err := workspace.Open(filepath.Join(b.dir, "forkws"))
	if err != nil {
		return err
	}
	m, err := manager.New(manager.Config{
		Dir: filepath.Join(b.dir, "forksb"), ExecutorPath: b.executor,
		Backends: map[string]sandbox.Backend{"gvisor": b.gv}, DefaultBackend: "gvisor",
		Images: manager.ImageStore(b.images), CheckInterval: time.Hour, DiskPool: n + 2,
		Workspaces: manager.WorkspaceStore(ws), Logger: slog.New(phases),
	})
	if err != nil {
		return err
	}
	defer m.Close()
	src, err := m.Create(b.ctx, "", sandbox.Spec{Image: "busybox"}, nil)
	if err != nil {
		return err
	}
	defer m.Delete(b.ctx, "", src.ID)
	ex, err := m.Client(b.ctx, "", src.ID)
	if err != nil {
		return err
	}
	if _, _, _, err := ex.Run(b.ctx, "sh", "-c", "for i in $(seq 16); do head -c 65536 /dev/urandom > /workspace/f$i; done"); err != nil {
		return err
	}
	removeAll := func(infos []sandbox.Info) {
		for _, info := range infos {
			m.Delete(b.ctx, "", info.ID)
		}
	}
	var forks, creates, raws []time.Duration
	for range rounds {
		time.Sleep(2 * time.Second) // the pool refills
		phases.set("fork")
		t0 := time.Now()
		infos, err := m.Fork(b.ctx, "", src.ID, n)
		if err != nil {
			return err
		}
		forks = append(forks, time.Since(t0))
		removeAll(infos)

		time.Sleep(2 * time.Second)
		phases.set("create")
		t0 = time.Now()
		made := make([]sandbox.Info, n)
		errs := make([]error, n)
		sem := make(chan struct{}, forkBound) // Fork's own bound
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				made[i], errs[i] = m.Create(b.ctx, "", sandbox.Spec{Image: "busybox"}, nil)
			})
		}
		wg.Wait()
		creates = append(creates, time.Since(t0))
		removeAll(made)
		for _, err := range errs {
			if err != nil {
				return err
			}
		}

		time.Sleep(2 * time.Second)
		raw, err := b.rawBurst(n, len(raws))
		if err != nil {
			return err
		}
		raws = append(raws, raw)
	}
	phases.set("")
	phases.print()
	f, c := pct(forks, 50), pct(creates, 50)
	b.add(fmt.Sprintf("fork ×%d of a running sandbox (1 MiB workspace), total, p50 of %d", n, rounds), ms(f),
		fmt.Sprintf("%s (%d creates of busybox, %d at a time)", ms(c), n, forkBound), float64(f)/float64(c), "≤ 1 s")
	r := pct(raws, 50)
	b.add(fmt.Sprintf("fork ×%d against the boots alone, p50 of %d", n, rounds), ms(f),
		fmt.Sprintf("%s (%d raw `runsc run` true at once, bare busybox: the floor)", ms(r), n), float64(f)/float64(r), "")
	return nil
}

// rawBurst times n raw `runsc run` of true in bare busybox, all at once
// (round names them apart): what n gVisor boots cost on this machine
// with nothing of reins around them.
func (b *bench) rawBurst(n, round int) (time.Duration, error) {
	errs := make([]error, n)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range n {
		wg.Go(func() { _, errs[i] = b.rawRun(fmt.Sprintf("burst-%d-%d", round, i), nil) })
	}
	wg.Wait()
	return time.Since(t0), errors.Join(errs...)
}

// forkPhases collects the durations the manager logs at debug level
// (its sandbox root, boot and fork timings), by round kind ("fork" or
// "create"), and prints their p50 and max: where a fork's time goes.
type forkPhases struct {
	mu   sync.Mutex
	kind string
	d    map[string][]time.Duration
	keys []string
}

func (p *forkPhases) set(kind string) {
	p.mu.Lock()
	p.kind = kind
	p.mu.Unlock()
}

func (p *forkPhases) Enabled(_ context.Context, l slog.Level) bool { return true }
func (p *forkPhases) WithAttrs([]slog.Attr) slog.Handler           { return p }
func (p *forkPhases) WithGroup(string) slog.Handler                { return p }
func (p *forkPhases) Handle(_ context.Context, r slog.Record) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.kind == "" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Value.Kind() == slog.KindDuration {
			k := p.kind + " " + strings.TrimPrefix(r.Message, "sandbox ") + "." + a.Key
			if _, ok := p.d[k]; !ok {
				p.keys = append(p.keys, k)
			}
			p.d[k] = append(p.d[k], a.Value.Duration())
		}
		return true
	})
	return nil
}

func (p *forkPhases) print() {
	p.mu.Lock()
	defer p.mu.Unlock()
	slices.Sort(p.keys)
	for _, k := range p.keys {
		fmt.Fprintf(os.Stderr, "  %-28s p50 %7s  max %7s  (%d)\n", k, ms(pct(p.d[k], 50)), ms(pct(p.d[k], 100)), len(p.d[k]))
	}
}
