package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/reinsdev/reins/agent"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/store"
)

func every(n int) *int { return &n }

// payloadsOf decodes the payloads of events of type typ, and gives their seqs.
func payloadsOf[T any](t *testing.T, evs []store.Event, typ string) ([]T, []int64) {
	t.Helper()
	var out []T
	var seqs []int64
	for _, ev := range eventsOf(evs, typ) {
		var d T
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatal(err)
		}
		out, seqs = append(out, d), append(seqs, ev.Seq)
	}
	return out, seqs
}

// resultSeqs are the seqs of the tool results, in order.
func resultSeqs(evs []store.Event) []int64 {
	var out []int64
	for _, ev := range evs {
		if ev.Type == runlog.EventToolResult {
			out = append(out, ev.Seq)
		}
	}
	return out
}

// A run checkpoints its sandbox every N mutating calls (reads do not
// count), each checkpoint logged after the snapshot with the seq it
// covers; the run's end takes one of what is left.
func TestCheckpointsEveryNMutatingCalls(t *testing.T) {
	e := newEnv(t)
	eng := e.engine()
	model := e.script(
		turn("", call("write_file", map[string]any{"path": "a.txt", "content": "A"})),
		turn("", call("read_file", map[string]any{"path": "a.txt"})),
		turn("", call("bash", map[string]any{"command": "echo B > b.txt"})),
		turn("", call("edit_file", map[string]any{"path": "a.txt", "old": "A", "new": "AA"})),
		turn("", call("glob", map[string]any{"pattern": "*.txt"})),
		map[string]any{"text": "done"},
	)
	id, err := eng.Start(context.Background(), "", runlog.Spec{Task: "x", Model: model, CheckpointEvery: every(2)})
	if err != nil {
		t.Fatal(err)
	}
	row, evs := e.finish(eng, id)
	if row.Status != "succeeded" {
		t.Fatalf("%s: %s", row.Status, summary(t, row).Reason)
	}
	cps, cpSeqs := payloadsOf[runlog.Checkpoint](t, evs, runlog.EventCheckpoint)
	res := resultSeqs(evs)
	// write, read, bash → one (after the bash); edit, glob, then the end → one.
	if len(cps) != 2 {
		t.Fatalf("%d checkpoints, want 2: %v", len(cps), types(evs))
	}
	if cps[0].Seq != res[2] || cpSeqs[0] <= res[2] || cpSeqs[0] >= res[3] {
		t.Errorf("first checkpoint covers seq %d (logged at %d); want the bash result's, %d, logged before the next call", cps[0].Seq, cpSeqs[0], res[2])
	}
	if cps[1].Seq <= res[4] || cps[1].Reason != "before the run parks" {
		t.Errorf("last checkpoint: %+v; want the end's, covering the final answer after seq %d", cps[1], res[4])
	}
	// a.txt "A", b.txt "B\n".
	if cps[0].Sandbox != "default" || cps[0].ID != "sb1" || cps[0].Files != 2 || cps[0].Bytes != 3 ||
		cps[0].Digest != e.sbs.checkpoints[0] || !strings.HasPrefix(cps[0].Digest, "sha256:") {
		t.Errorf("first checkpoint %+v; want sandbox default sb1 with a.txt and b.txt (2 files, 3 bytes), digest %s", cps[0], e.sbs.checkpoints[0])
	}
	if cps[0].Digest == cps[1].Digest {
		t.Error("the edit changed a.txt, but both checkpoints have the same digest")
	}

	// Off: none at all.
	e.sbs.checkpoints = nil
	id, _ = eng.Start(context.Background(), "", runlog.Spec{Task: "x", Model: model, CheckpointEvery: every(0)})
	_, evs = e.finish(eng, id)
	if cps, _ := payloadsOf[runlog.Checkpoint](t, evs, runlog.EventCheckpoint); len(cps) != 0 || len(e.sbs.checkpoints) != 0 {
		t.Errorf("--checkpoint-every 0 took %d checkpoints", len(e.sbs.checkpoints))
	}
	if _, err := eng.Start(context.Background(), "", runlog.Spec{Task: "x", Model: model, CheckpointEvery: every(-1)}); err == nil {
		t.Error("a negative --checkpoint-every was accepted")
	}
}

// A snapshot that fails is a note in the log, never a failed run, and is
// tried again only after as many calls as a checkpoint waits for.
func TestCheckpointFailureIsANote(t *testing.T) {
	e := newEnv(t)
	e.sbs.failCheckpoints = true
	eng := e.engine()
	var turns []map[string]any
	for range 4 {
		turns = append(turns, turn("", call("bash", map[string]any{"command": "echo x >> x.txt"})))
	}
	model := e.script(append(turns, map[string]any{"text": "done"})...)
	id, _ := eng.Start(context.Background(), "", runlog.Spec{Task: "x", Model: model, CheckpointEvery: every(2)})
	row, evs := e.finish(eng, id)
	if row.Status != "succeeded" {
		t.Fatalf("a failing checkpoint failed the run: %s: %s", row.Status, summary(t, row).Reason)
	}
	failed, _ := payloadsOf[runlog.Checkpoint](t, evs, runlog.EventCheckpointFailed)
	// After call 2, after call 4; the end has nothing new since the last try.
	if len(failed) != 2 || !strings.Contains(failed[0].Error, "no space left") || failed[0].Digest != "" {
		t.Errorf("failed checkpoints %+v; want 2 that say why", failed)
	}
	if cps, _ := payloadsOf[runlog.Checkpoint](t, evs, runlog.EventCheckpoint); len(cps) != 0 {
		t.Errorf("checkpoints recorded though none was taken: %+v", cps)
	}
}

// A sandbox lost with its disk is replaced from the newest checkpoint: it
// has the files checkpointed and not what came after; the replacement's
// event names the snapshot.
func TestLostSandboxRestoresTheNewestCheckpoint(t *testing.T) {
	e := newEnv(t)
	eng := e.engine()
	model := e.script(
		turn("", call("write_file", map[string]any{"path": "a.txt", "content": "A"})),
		turn("", call("write_file", map[string]any{"path": "b.txt", "content": "B"})),
		turn("", call("write_file", map[string]any{"path": "c.txt", "content": "C"})),
		turn("", call("bash", map[string]any{"command": "cat a.txt b.txt; ls"})),
		map[string]any{"expect": "was lost", "tool_calls": []any{call("bash", map[string]any{"command": "cat a.txt b.txt; ls"})}},
		map[string]any{"expect": "AB", "text": "recovered"},
	)
	results := 0
	e.fail = func(name string) {
		if name == "after_result" {
			if results++; results == 3 {
				e.sbs.loseDisk("sb1") // after c.txt, which no checkpoint holds
			}
		}
	}
	id, _ := eng.Start(context.Background(), "", runlog.Spec{Task: "x", Model: model, CheckpointEvery: every(2)})
	row, evs := e.finish(eng, id)
	if row.Status != "succeeded" {
		t.Fatalf("%s: %s; %v", row.Status, summary(t, row).Reason, types(evs))
	}
	cps, _ := payloadsOf[runlog.Checkpoint](t, evs, runlog.EventCheckpoint)
	reps, _ := payloadsOf[runlog.SandboxEvent](t, evs, runlog.EventSandboxReplaced)
	if len(cps) < 1 || len(reps) != 1 {
		t.Fatalf("checkpoints %+v, replacements %+v", cps, reps)
	}
	if reps[0].From != runlog.FromSnapshot || reps[0].Snapshot != cps[0].Digest || !strings.Contains(reps[0].Note, cps[0].Digest) {
		t.Errorf("replacement %+v; want it from checkpoint %s, named", reps[0], cps[0].Digest)
	}
	var ls runlog.ToolResult
	res, _ := payloadsOf[runlog.ToolResult](t, evs, runlog.EventToolResult)
	ls = res[len(res)-1]
	if !strings.Contains(ls.Text, "AB") || strings.Contains(ls.Text, "c.txt") {
		t.Errorf("the replacement's files: %q; want a.txt and b.txt, not c.txt", ls.Text)
	}
	// The replacement's checkpoint state starts again: the end's
	// checkpoint covers only what it did.
	if got := e.sbs.replacedFrom; len(got) != 1 || got[0] != cps[0].Digest {
		t.Errorf("Replace was asked for %v; want [%s]", got, cps[0].Digest)
	}
}

// A fork at a seq restores, for its sandbox, the checkpoint taken at or
// before it: the fork sees a.txt (step 1) and not b.txt (step 2), and its
// events name the snapshot. A fork before any checkpoint starts from the
// image and says so.
func TestForkRestoresTheCheckpointAtSeq(t *testing.T) {
	e := newEnv(t)
	eng := e.engine()
	model := e.script(
		turn("", call("write_file", map[string]any{"path": "a.txt", "content": "A"})),
		turn("", call("write_file", map[string]any{"path": "b.txt", "content": "B"})),
		map[string]any{"text": "done"},
	)
	id, _ := eng.Start(context.Background(), "", runlog.Spec{Task: "x", Model: model, CheckpointEvery: every(1)})
	row, evs := e.finish(eng, id)
	if row.Status != "succeeded" {
		t.Fatalf("%s: %s", row.Status, summary(t, row).Reason)
	}
	res := resultSeqs(evs)
	cps, _ := payloadsOf[runlog.Checkpoint](t, evs, runlog.EventCheckpoint)
	if len(cps) != 2 || cps[0].Seq != res[0] {
		t.Fatalf("checkpoints %+v; want one after each write", cps)
	}
	// The fork's history has one model turn: its script starts at its second.
	forkModel := e.script(
		turn("not played"),
		turn("", call("bash", map[string]any{"command": "ls"})),
		map[string]any{"text": "seen"},
	)
	fork := func(at int64) []store.Event {
		fid, err := eng.Fork(context.Background(), "", id, at, forkModel, "")
		if err != nil {
			t.Fatal(err)
		}
		frow, fevs := e.finish(eng, fid)
		if frow.Status != "succeeded" {
			t.Fatalf("fork at %d: %s: %s", at, frow.Status, summary(t, frow).Reason)
		}
		return fevs
	}
	// The seq after step 1's result: its checkpoint (logged after it).
	fevs := fork(res[0])
	forked, _ := payloadsOf[runlog.Forked](t, fevs, runlog.EventForked)
	created, _ := payloadsOf[runlog.SandboxEvent](t, fevs, runlog.EventSandboxCreated)
	if len(forked) != 1 || forked[0].Snapshots["default"] != cps[0].Digest {
		t.Fatalf("forked %+v; want default from %s", forked, cps[0].Digest)
	}
	if !strings.Contains(forked[0].Message, "as they were") {
		t.Errorf("the fork's model is told %q", forked[0].Message)
	}
	last := created[len(created)-1]
	if last.From != runlog.FromSnapshot || last.Snapshot != cps[0].Digest {
		t.Errorf("the fork's sandbox: %+v; want it from %s", last, cps[0].Digest)
	}
	fres, _ := payloadsOf[runlog.ToolResult](t, fevs, runlog.EventToolResult)
	if ls := fres[len(fres)-1].Text; !strings.Contains(ls, "a.txt") || strings.Contains(ls, "b.txt") {
		t.Errorf("the fork sees %q; want a.txt and not b.txt", ls)
	}

	// Before the first checkpoint (step 1's sandbox, made before its
	// result): the image.
	fevs = fork(res[0] - 1)
	forked, _ = payloadsOf[runlog.Forked](t, fevs, runlog.EventForked)
	created, _ = payloadsOf[runlog.SandboxEvent](t, fevs, runlog.EventSandboxCreated)
	last = created[len(created)-1]
	if len(forked[0].Snapshots) != 0 || last.From != runlog.FromImage || !strings.Contains(forked[0].Message, "images") {
		t.Errorf("a fork before any checkpoint: %+v, %+v; want it from the image, said", forked[0], last)
	}
}

// events reads a run's row and whole log.
func (e *env) events(id string) (store.Run, []store.Event) {
	e.t.Helper()
	row, err := e.st.GetRun(context.Background(), "", id)
	if err != nil {
		e.t.Fatal(err)
	}
	evs, err := e.st.Events(context.Background(), id, 0, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return row, evs
}

// A lifecycle event of a run's sandbox that the run did not cause (an
// expiry warning) is logged with the run's next tool result; one of a
// sandbox of no run is not.
func TestSandboxNotesReachTheRunsLog(t *testing.T) {
	e := newEnv(t)
	eng := e.engine()
	model := e.script(
		turn("", call("bash", map[string]any{"command": "true"})),
		turn("", call("bash", map[string]any{"command": "true"})),
		map[string]any{"text": "done"},
	)
	results := 0
	e.fail = func(name string) {
		if name == "after_result" {
			if results++; results == 1 {
				eng.NoteSandbox(agent.SandboxNote{Sandbox: "sb1", Kind: "expiring", Message: "expires in 1m0s"})
				eng.NoteSandbox(agent.SandboxNote{Sandbox: "elsewhere", Kind: "expiring", Message: "not this run's"})
			}
		}
	}
	id, _ := eng.Start(context.Background(), "", runlog.Spec{Task: "x", Model: model})
	row, evs := e.finish(eng, id)
	if row.Status != "succeeded" {
		t.Fatalf("%s: %s", row.Status, summary(t, row).Reason)
	}
	notes, seqs := payloadsOf[runlog.SandboxEvent](t, evs, runlog.EventSandboxLifecycle)
	res := resultSeqs(evs)
	if len(notes) != 1 || notes[0].ID != "sb1" || notes[0].Name != "default" || notes[0].Reason != "expiring" ||
		notes[0].Note != "expires in 1m0s" || seqs[0] < res[0] || seqs[0] > res[1] {
		t.Errorf("lifecycle events %+v at %v; want sb1's expiring, with the second result (%v)", notes, seqs, res)
	}
}
