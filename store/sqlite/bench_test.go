package sqlite_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/store"
	"github.com/reinsdev/reins/store/sqlite"
)

// smallEvent is about what one loop step appends: a tool result of a
// `true` command.
var smallEvent = store.Event{Type: "tool_result",
	Data: json.RawMessage(`{"call_id":"toolu_01","name":"bash","exit_code":0,"stdout":"","stderr":"","duration_ms":3}`)}

func benchStore(b *testing.B) (*sqlite.Store, context.Context) {
	s := open(b, filepath.Join(b.TempDir(), "reins.db"))
	b.Cleanup(func() { s.Close() })
	return s, context.Background()
}

// BenchmarkAppend is one durable Append of one small event with a summary
// update, what the loop does per step.
func BenchmarkAppend(b *testing.B) {
	s, ctx := benchStore(b)
	if err := s.CreateRun(ctx, store.Run{ID: "r1", Tenant: "acme", Spec: json.RawMessage(`{}`)}); err != nil {
		b.Fatal(err)
	}
	var seq int64
	for b.Loop() {
		last, err := s.Append(ctx, "r1", seq, []store.Event{smallEvent},
			store.RunUpdate{Summary: fmt.Appendf(nil, `{"steps":%d}`, seq+1)})
		if err != nil {
			b.Fatal(err)
		}
		seq = last
	}
}

// BenchmarkFsync is the floor under BenchmarkAppend, measured in the same
// run on the same disk: overwrite 4 KiB of a file and fsync it.
func BenchmarkFsync(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "fsync"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	page := make([]byte, 4096)
	for b.Loop() {
		if _, err := f.WriteAt(page, 0); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendParallel is many runs' loops appending at once; all share
// the one writer.
func BenchmarkAppendParallel(b *testing.B) {
	s, ctx := benchStore(b)
	var next atomic.Int64
	b.SetParallelism(25) // 50 loops on 2 cores
	b.RunParallel(func(pb *testing.PB) {
		id := fmt.Sprintf("r%d", next.Add(1))
		if err := s.CreateRun(ctx, store.Run{ID: id, Tenant: "acme"}); err != nil {
			b.Error(err)
			return
		}
		var seq int64
		for pb.Next() {
			last, err := s.Append(ctx, id, seq, []store.Event{smallEvent}, store.RunUpdate{})
			if err != nil {
				b.Error(err)
				return
			}
			seq = last
		}
	})
}

// BenchmarkEvents1000 reads back a whole 1000-event log, what the loop does
// when it resumes a run.
func BenchmarkEvents1000(b *testing.B) {
	s, ctx := benchStore(b)
	if err := s.CreateRun(ctx, store.Run{ID: "r1", Tenant: "acme"}); err != nil {
		b.Fatal(err)
	}
	batch := make([]store.Event, 100)
	for i := range batch {
		batch[i] = smallEvent
	}
	for i := range 10 {
		if _, err := s.Append(ctx, "r1", int64(i*100), batch, store.RunUpdate{}); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		events, err := s.Events(ctx, "r1", 0, 0)
		if err != nil || len(events) != 1000 {
			b.Fatalf("Events: %d, %v", len(events), err)
		}
	}
}

// egressBatch is what the proxy flushes at once: 100 entries of one
// sandbox, each about what one HTTPS connection logs.
func egressBatch() []egress.Entry {
	batch := make([]egress.Entry, 100)
	for i := range batch {
		batch[i] = egress.Entry{Time: time.Now(), Sandbox: "sbx-bench", Proto: "tls", Host: "pypi.org", Port: 443,
			Addr: "151.101.0.223:443", Allowed: true, Rule: "allow-host *.pypi.org", BytesOut: 812, BytesIn: 48213,
			Duration: 180 * time.Millisecond}
	}
	return batch
}

// BenchmarkAppendEgress is one AppendEgress of a batch of 100 entries.
// Its baseline, timed in the same loop turn by turn so that a shared
// machine's load weighs on both alike, is one Append of 100 small events
// to a run's log: the same rows, JSON and durable commit the store
// already pays for a run. It reports both, per batch, and their ratio
// (x-events).
func BenchmarkAppendEgress(b *testing.B) {
	benchAppendEgress(b, 0)
}

// BenchmarkAppendEgressAtBound is the same once the sandbox's log is full
// (store.MaxEgressPerSandbox entries), so each append also drops the
// oldest 100.
func BenchmarkAppendEgressAtBound(b *testing.B) {
	benchAppendEgress(b, store.MaxEgressPerSandbox)
}

func benchAppendEgress(b *testing.B, prefill int) {
	s, ctx := benchStore(b)
	batch := egressBatch()
	for range prefill / len(batch) {
		if err := s.AppendEgress(ctx, "acme", batch); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.CreateRun(ctx, store.Run{ID: "r1", Tenant: "acme"}); err != nil {
		b.Fatal(err)
	}
	events := make([]store.Event, len(batch))
	for i := range events {
		events[i] = smallEvent
	}
	var egressTime, eventsTime time.Duration
	var seq int64
	for b.Loop() {
		t0 := time.Now()
		if err := s.AppendEgress(ctx, "acme", batch); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		last, err := s.Append(ctx, "r1", seq, events, store.RunUpdate{})
		if err != nil {
			b.Fatal(err)
		}
		seq = last
		egressTime += t1.Sub(t0)
		eventsTime += time.Since(t1)
	}
	n := float64(b.N)
	b.ReportMetric(float64(egressTime.Nanoseconds())/n, "egress-ns/batch")
	b.ReportMetric(float64(eventsTime.Nanoseconds())/n, "events-ns/batch")
	b.ReportMetric(float64(egressTime)/float64(eventsTime), "x-events")
}
