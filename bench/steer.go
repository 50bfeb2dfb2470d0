package main

import (
	"fmt"
	"time"

	"github.com/reinsdev/reins/agent"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/sandbox/manager"
	"github.com/reinsdev/reins/tool"
)

// gate is a trusted no-op tool that the steering benchmark's policy asks
// about.
type gate struct{ noop }

func (gate) Spec() tool.Spec {
	s := noop{}.Spec()
	s.Name = "gate"
	return s
}

// steer: what steering a waiting run costs when its log is long (events
// of no-op steps, then calls a person must approve): reading what it waits
// on (GetRun's pending calls) and approving one, beside one read of its
// whole log from the store, which is what each call cost when it folded
// the log.
func (b *bench) steer(events, approvals int) error {
	st, blobs, err := b.stores("steer")
	if err != nil {
		return err
	}
	defer st.Close()
	step := map[string]any{"tool_calls": []any{map[string]any{"name": "noop", "input": map[string]any{}}}}
	ask := map[string]any{"tool_calls": []any{map[string]any{"name": "gate", "input": map[string]any{}}}}
	var turns []any
	for range events / 3 { // a response, an intent, a result
		turns = append(turns, step)
	}
	for range approvals {
		turns = append(turns, ask)
	}
	turns = append(turns, map[string]any{"text": "done"})
	eng, p, err := b.scripted("steer", turns, agent.Config{Store: st, Blobs: blobs, Sandboxes: manager.Runs{M: b.m},
		Trusted: []tool.Tool{noop{}, gate{}}})
	if err != nil {
		return err
	}
	defer eng.Close()
	id, err := eng.Start(b.ctx, "", runlog.Spec{Task: "steer", Model: "script:" + p, MaxSteps: len(turns) + 5,
		Policy: "tools:\n  gate: ask\n"})
	if err != nil {
		return err
	}
	parked := func(want runlog.Status) error {
		if err := eng.Wait(b.ctx, id); err != nil {
			return err
		}
		if row, _ := st.GetRun(b.ctx, "", id); row.Status != string(want) {
			return fmt.Errorf("steering run is %s, want %s", row.Status, want)
		}
		return nil
	}
	if err := parked(runlog.StatusWaitingApproval); err != nil {
		return err
	}
	row, _ := st.GetRun(b.ctx, "", id)
	// The baseline: one read of the whole log (no fold).
	var read time.Duration
	const reads = 20
	for range reads {
		t0 := time.Now()
		evs, err := st.Events(b.ctx, id, 0, 0)
		read += time.Since(t0)
		if err != nil || len(evs) < events {
			return fmt.Errorf("reading the log: %d events, %v", len(evs), err)
		}
	}
	read /= reads
	// What the API's GetRun asks the engine of a waiting run.
	const gets = 200
	t0 := time.Now()
	for range gets {
		if p, err := eng.PendingApprovals(b.ctx, "", id); err != nil || len(p) != 1 {
			return fmt.Errorf("pending approvals: %v, %v", p, err)
		}
	}
	get := time.Since(t0) / gets
	var approve time.Duration
	for i := range approvals {
		t0 := time.Now()
		if err := eng.Decide(b.ctx, "", id, runlog.ApprovalDecided{Approved: true, Actor: "bench"}); err != nil {
			return err
		}
		approve += time.Since(t0)
		want := runlog.StatusWaitingApproval
		if i == approvals-1 {
			want = runlog.StatusSucceeded
		}
		if err := parked(want); err != nil {
			return err
		}
	}
	approve /= time.Duration(approvals)
	b.add(fmt.Sprintf("GetRun's pending calls of a waiting run, %d-event log", row.LastSeq), µs(get),
		ms(read)+" one read of its log", ratio(get, read), "≪ 1× (no log read)")
	b.add(fmt.Sprintf("approve a call of a waiting run, %d-event log", row.LastSeq), µs(approve),
		ms(read)+" one read of its log", ratio(approve, read), "≪ 1× (no log read)")
	return nil
}

func µs(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/1e3) }
