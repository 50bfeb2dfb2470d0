package agent_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reinsdev/reins/agent"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/store"
)

// countingStore is the real SQLite store, counting the events it hands
// out.
type countingStore struct {
	store.Store
	read atomic.Int64
}

func (c *countingStore) Events(ctx context.Context, runID string, afterSeq int64, limit int) ([]store.Event, error) {
	evs, err := c.Store.Events(ctx, runID, afterSeq, limit)
	c.read.Add(int64(len(evs)))
	return evs, err
}

// TestSteeringReadsNoLog: steering a parked run with a long log (what it
// waits on, approve, pause, resume) reads none of its events: the engine
// keeps the folded state of parked runs and hands it to the worker it
// starts. After a restart, the first call folds the log once.
func TestSteeringReadsNoLog(t *testing.T) {
	e := newEnv(t)
	cs := &countingStore{Store: e.st}
	real := e.st
	newEngine := func() *agent.Engine {
		eng, err := agent.New(agent.Config{Store: cs, Blobs: e.blobs, Sandboxes: e.sbs, Models: e.engineModels()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(eng.Close)
		return eng
	}
	const filler = 300 // tool calls before the first approval: 3 events each
	var turns []map[string]any
	for range filler {
		turns = append(turns, turn("", call("glob", map[string]any{"pattern": "*"})))
	}
	for range 3 {
		turns = append(turns, turn("", call("bash", map[string]any{"command": "echo hi"})))
	}
	turns = append(turns, turn("done"))
	ctx := context.Background()
	eng := newEngine()
	id, err := eng.Start(ctx, "", runlog.Spec{Task: "x", Model: e.script(turns...), MaxSteps: filler + 10,
		Policy: "tools:\n  bash: ask\n"})
	if err != nil {
		t.Fatal(err)
	}
	waitParked := func(eng *agent.Engine) store.Run {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		if err := eng.Wait(wctx, id); err != nil {
			t.Fatal(err)
		}
		row, err := real.GetRun(ctx, "", id)
		if err != nil {
			t.Fatal(err)
		}
		return row
	}
	row := waitParked(eng)
	if row.Status != string(runlog.StatusWaitingApproval) || row.LastSeq < 3*filler {
		t.Fatalf("run is %s with %d events, want waiting with a long log", row.Status, row.LastSeq)
	}
	// reads runs fn and returns how many events it read.
	reads := func(what string, fn func() error) int64 {
		t.Helper()
		before := cs.read.Load()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return cs.read.Load() - before
	}
	pending := func(eng *agent.Engine) func() error {
		return func() error {
			p, err := eng.PendingApprovals(ctx, "", id)
			if err == nil && (len(p) != 1 || p[0].Tool != "bash") {
				t.Errorf("pending = %+v, want one bash call", p)
			}
			return err
		}
	}
	if n := reads("pending", pending(eng)); n != 0 {
		t.Errorf("PendingApprovals of a parked run read %d events, want 0", n)
	}
	if n := reads("pause", func() error { return eng.Pause(ctx, "", id) }); n != 0 {
		t.Errorf("Pause read %d events, want 0", n)
	}
	if n := reads("resume", func() error { return eng.Resume(ctx, "", id) }); n != 0 {
		t.Errorf("Resume read %d events, want 0", n)
	}
	// Approving starts a worker on the kept state: it runs the call, asks
	// the model and parks again on the next call, reading nothing.
	n := reads("approve", func() error {
		if err := eng.Decide(ctx, "", id, runlog.ApprovalDecided{Approved: true, Actor: "t"}); err != nil {
			return err
		}
		if row := waitParked(eng); row.Status != string(runlog.StatusWaitingApproval) {
			t.Errorf("after approving: %s, want waiting for the next call", row.Status)
		}
		return nil
	})
	if n != 0 {
		t.Errorf("approving and running on to the next approval read %d events, want 0", n)
	}

	// A restart keeps nothing: the first call folds the log once, the
	// next ones read nothing.
	eng.Close()
	eng2 := newEngine()
	row = waitParked(eng2)
	if n := reads("pending after restart", pending(eng2)); n != row.LastSeq {
		t.Errorf("first call after a restart read %d events, want the log once (%d)", n, row.LastSeq)
	}
	if n := reads("pending again", pending(eng2)); n != 0 {
		t.Errorf("second call after a restart read %d events, want 0", n)
	}
	if n := reads("approve after restart", func() error {
		return eng2.Decide(ctx, "", id, runlog.ApprovalDecided{Approved: true, Actor: "t"})
	}); n != 0 {
		t.Errorf("Decide after a restart read %d events, want 0", n)
	}
	waitParked(eng2)
	if err := eng2.Decide(ctx, "", id, runlog.ApprovalDecided{Approved: true, Actor: "t"}); err != nil {
		t.Fatal(err)
	}
	if row := waitParked(eng2); row.Status != string(runlog.StatusSucceeded) {
		t.Errorf("run ended %s, want succeeded", row.Status)
	}
	// The state the engine kept decided the same as the log: the run did
	// every call once, in order.
	evs, err := real.Events(ctx, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, ev := range evs {
		if ev.Type == runlog.EventToolResult {
			calls++
		}
	}
	if calls != filler+3 {
		t.Errorf("%d tool results, want %d", calls, filler+3)
	}
}
