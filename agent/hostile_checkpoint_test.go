package agent_test

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"testing"

	"github.com/reinsdev/reins/runlog"
)

// A checkpoint that fails on the service's own disk (its snapshot record
// under the data directory, say) is a note in the run's log, which the
// run's tenant reads: the note says why without the host path the
// error's chain names (DESIGN trust rule 2).
func TestHostileCheckpointFailureNamesNoHostPath(t *testing.T) {
	const hostPath = "/var/lib/reins/snapshots/0123abcd.json.tmp"
	e := newEnv(t)
	e.sbs.checkpointErr = fmt.Errorf("recording the snapshot: %w", &fs.PathError{Op: "open", Path: hostPath, Err: syscall.ENOSPC})
	eng := e.engine()
	model := e.script(turn("", call("bash", map[string]any{"command": "echo x > x.txt"})), map[string]any{"text": "done"})
	id, err := eng.Start(context.Background(), "", runlog.Spec{Task: "x", Model: model, CheckpointEvery: every(1)})
	if err != nil {
		t.Fatal(err)
	}
	_, evs := e.finish(eng, id)
	failed, _ := payloadsOf[runlog.Checkpoint](t, evs, runlog.EventCheckpointFailed)
	if len(failed) == 0 {
		t.Fatalf("no checkpoint_failed event: %v", types(evs))
	}
	for _, ev := range evs {
		if strings.Contains(string(ev.Data), "/var/lib/reins") {
			t.Errorf("event %d (%s) names a host path: %s", ev.Seq, ev.Type, ev.Data)
		}
	}
	if !strings.Contains(failed[0].Error, "no space left on device") {
		t.Errorf("the note lost why: %q", failed[0].Error)
	}
}

// A sandbox tool whose sandbox cannot be made on the service's disk is an
// error result the model reads (and the log keeps): it says why without
// the host path.
func TestHostileToolErrorNamesNoHostPath(t *testing.T) {
	e := newEnv(t)
	e.sbs.createErr = fmt.Errorf("creating sandbox: making its directory: %w", &fs.PathError{Op: "mkdir", Path: "/var/lib/reins/sandboxes/sb_1", Err: syscall.ENOSPC})
	eng := e.engine()
	model := e.script(turn("", call("bash", map[string]any{"command": "true"})), map[string]any{"text": "done"})
	id, err := eng.Start(context.Background(), "", runlog.Spec{Task: "x", Model: model})
	if err != nil {
		t.Fatal(err)
	}
	_, evs := e.finish(eng, id)
	results, _ := payloadsOf[runlog.ToolResult](t, evs, runlog.EventToolResult)
	if len(results) == 0 || !results[0].IsError || !strings.Contains(results[0].Text, "no space left on device") {
		t.Fatalf("tool results %+v; want an error that says why", results)
	}
	for _, ev := range evs {
		if strings.Contains(string(ev.Data), "/var/lib/reins") {
			t.Errorf("event %d (%s) names a host path: %s", ev.Seq, ev.Type, ev.Data)
		}
	}
}
