package agent_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/reinsdev/reins/agent"
	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/tool/sandboxtool"
)

// egressSandboxes are host sandboxes with an egress log that a command
// fills (the test's stand-in for the proxy writing it as the command runs).
type egressSandboxes struct {
	*hostSandboxes
	mu    sync.Mutex
	log   map[string][]egress.Entry
	calls int
}

func (s *egressSandboxes) EgressSince(ctx context.Context, id string, after int64) ([]egress.Entry, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	all := s.log[id]
	if int(after) >= len(all) {
		return nil, after, nil
	}
	return all[after:], int64(len(all)), nil
}

func (s *egressSandboxes) Executor(ctx context.Context, id string) (sandboxtool.Executor, error) {
	s.mu.Lock()
	s.calls++
	n := s.calls
	s.mu.Unlock()
	switch n {
	case 1:
		s.add(id, 2, true)
		s.add(id, 1, false)
	case 3:
		s.add(id, 150, true)
	}
	return s.hostSandboxes.Executor(ctx, id)
}

func (s *egressSandboxes) add(id string, n int, allowed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.log[id] = append(s.log[id], egress.Entry{Time: time.Now(), Sandbox: id, Proto: "http", Host: "example.com", Port: 80, Allowed: allowed, Rule: "test"})
	}
}

// The connections a run's sandbox made during a call are events after the
// call's intent, before its result; each entry is recorded once; more
// than an event carries are counted.
func TestEgressEvents(t *testing.T) {
	e := newEnv(t)
	sbs := &egressSandboxes{hostSandboxes: e.sbs, log: map[string][]egress.Entry{}}
	eng, err := agent.New(agent.Config{Store: e.st, Blobs: e.blobs, Sandboxes: sbs, Models: e.engineModels()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	// The script's commands cannot reach the fake log; the test adds to it
	// when a call reaches for its executor: 3 entries (1 denied) in the
	// first call, none in the second, 150 in the third.
	model := e.script(
		turn("", call("bash", map[string]any{"command": "echo one"})),
		turn("", call("bash", map[string]any{"command": "echo two"})),
		turn("", call("bash", map[string]any{"command": "echo three"})),
		turn("done"),
	)
	id, err := eng.Start(context.Background(), "", runlog.Spec{Task: "reach out", Model: model})
	if err != nil {
		t.Fatal(err)
	}
	row, evs := e.finish(eng, id)
	if row.Status != "succeeded" {
		t.Fatalf("run: %s %v", row.Status, types(evs))
	}
	var got []runlog.Egress
	for i, ev := range evs {
		if ev.Type != runlog.EventEgress {
			continue
		}
		if evs[i+1].Type != runlog.EventToolResult {
			t.Errorf("egress event %d is followed by %s, not the call's result", ev.Seq, evs[i+1].Type)
		}
		var d runlog.Egress
		json.Unmarshal(ev.Data, &d)
		got = append(got, d)
	}
	if len(got) != 2 {
		t.Fatalf("%d egress events, want 2 (none for the call that reached nothing): %v", len(got), types(evs))
	}
	if g := got[0]; len(g.Entries) != 3 || g.Denied != 1 || g.AfterSeq != 0 || g.LastSeq != 3 || g.Sandbox != runlog.DefaultSandbox {
		t.Errorf("first egress event: %+v", g)
	}
	if g := got[1]; len(g.Entries) != 100 || g.Omitted != 50 || g.AfterSeq != 3 || g.LastSeq != 153 {
		t.Errorf("second egress event: %d entries, %+v", len(g.Entries), g)
	}
}
