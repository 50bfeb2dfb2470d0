package sqlite_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

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
