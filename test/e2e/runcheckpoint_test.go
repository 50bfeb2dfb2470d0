package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
)

// runEvents reads a run's log through the CLI (runs events --json), typed.
func runEvents(t *testing.T, s *service, token, id string) []*reinsv1.RunEvent {
	t.Helper()
	r := s.asTenant(token, "runs", "events", "--json", id)
	if r.code != 0 {
		t.Fatalf("runs events %s: %s", id, r)
	}
	var out []*reinsv1.RunEvent
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		ev := &reinsv1.RunEvent{}
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(line), ev); err != nil {
			t.Fatalf("an event line does not read: %v: %s", err, line)
		}
		out = append(out, ev)
	}
	return out
}

// ofType are the events of type typ.
func ofType(evs []*reinsv1.RunEvent, typ reinsv1.EventType) []*reinsv1.RunEvent {
	var out []*reinsv1.RunEvent
	for _, ev := range evs {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

func writeFile(path, content string) map[string]any {
	return map[string]any{"tool_calls": []any{map[string]any{"name": "write_file", "input": map[string]any{"path": path, "content": content}}}}
}

// runSandbox is the id of a run's sandbox "default" now.
func runSandbox(t *testing.T, s *service, id string) string {
	t.Helper()
	var sb string
	eventually(t, 60*time.Second, "run "+id+" has a sandbox", func() (bool, string) {
		evs := runEvents(t, s, s.token, id)
		for _, ev := range evs {
			if ev.Type == reinsv1.EventType_EVENT_TYPE_SANDBOX_CREATED || ev.Type == reinsv1.EventType_EVENT_TYPE_SANDBOX_REPLACED {
				sb = ev.GetSandbox().GetId()
			}
		}
		return sb != "", fmt.Sprint(len(evs), " events")
	})
	return sb
}

// TestRunCheckpointFork: a scripted run writes a.txt (step 1) and b.txt
// (step 2), checkpointing after each; a fork at the seq after step 1 has
// a.txt and not b.txt, and its events name the checkpoint it started
// from; a fork before any checkpoint starts from the image and says so.
func TestRunCheckpointFork(t *testing.T) {
	s := startService(t)
	script := writeScript(t,
		writeFile("/workspace/a.txt", "A"),
		writeFile("/workspace/b.txt", "B"),
		map[string]any{"text": "wrote both"})
	r := s.run("run", "--checkpoint-every", "1", "--model", "script:"+script, "write two files")
	if r.code != 0 || !strings.Contains(r.stdout, "checkpoint of sandbox default") {
		t.Fatalf("the run, shown live: %s", r)
	}
	var id string
	for _, line := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "run" {
			id = f[1]
		}
	}
	evs := runEvents(t, s, s.token, id)
	results := ofType(evs, reinsv1.EventType_EVENT_TYPE_TOOL_RESULT)
	cps := ofType(evs, reinsv1.EventType_EVENT_TYPE_CHECKPOINT)
	if len(results) != 2 || len(cps) != 2 {
		t.Fatalf("%d results and %d checkpoints, want 2 and 2", len(results), len(cps))
	}
	cp1 := cps[0].GetCheckpoint()
	if cp1.Seq != results[0].Seq || cps[0].Seq <= results[0].Seq || !strings.HasPrefix(cp1.Digest, "sha256:") || cp1.Files < 1 {
		t.Fatalf("the first checkpoint (event %d) %v; want it to cover step 1's result, event %d", cps[0].Seq, cp1, results[0].Seq)
	}
	// runs show and replay render each checkpoint on one line.
	if rep := s.must("runs", "replay", id); strings.Count(rep, "checkpoint of sandbox default after event") != 2 {
		t.Errorf("replay shows the checkpoints as:\n%s", rep)
	}

	// The fork's history holds step 1: its script starts at turn 2.
	forkScript := writeScript(t, map[string]any{"text": "(history)"},
		map[string]any{"expect": "as they were", "tool_calls": []any{map[string]any{"name": "bash", "input": map[string]any{"command": "ls /workspace"}}}},
		map[string]any{"expect": "a.txt", "text": "forked"})
	r = s.run("runs", "fork", id, "--at", fmt.Sprint(results[0].Seq), "--model", "script:"+forkScript, "--json")
	if r.code != 0 {
		t.Fatalf("fork after step 1: %s", r)
	}
	fork := &reinsv1.Run{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(r.stdout), fork); err != nil {
		t.Fatalf("fork --json: %v: %s", err, r.stdout)
	}
	fevs := runEvents(t, s, s.token, fork.Id)
	forked := ofType(fevs, reinsv1.EventType_EVENT_TYPE_FORKED)
	if len(forked) != 1 || forked[0].GetForked().GetSnapshots()["default"] != cp1.Digest {
		t.Fatalf("forked %v; want default from %s", forked, cp1.Digest)
	}
	created := ofType(fevs, reinsv1.EventType_EVENT_TYPE_SANDBOX_CREATED)
	own := created[len(created)-1].GetSandbox()
	if own.From != "snapshot" || own.Snapshot != cp1.Digest {
		t.Errorf("the fork's sandbox: %v; want it from %s", own, cp1.Digest)
	}
	fres := ofType(fevs, reinsv1.EventType_EVENT_TYPE_TOOL_RESULT)
	ls := fres[len(fres)-1].GetToolResult().Text
	if !strings.Contains(ls, "a.txt") || strings.Contains(ls, "b.txt") {
		t.Errorf("the fork at step 1 sees %q; want a.txt and not b.txt", ls)
	}

	// Before the first checkpoint (the first model response): the image.
	noneScript := writeScript(t, map[string]any{"text": "(history)"},
		map[string]any{"expect": "starts from its image", "tool_calls": []any{map[string]any{"name": "bash", "input": map[string]any{"command": "ls /workspace"}}}},
		map[string]any{"text": "fresh"})
	firstResponse := ofType(evs, reinsv1.EventType_EVENT_TYPE_MODEL_RESPONSE)[0].Seq
	r = s.run("runs", "fork", id, "--at", fmt.Sprint(firstResponse), "--model", "script:"+noneScript, "--json")
	if r.code != 0 {
		t.Fatalf("fork before any checkpoint: %s", r)
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(r.stdout), fork); err != nil {
		t.Fatal(err)
	}
	fevs = runEvents(t, s, s.token, fork.Id)
	forked = ofType(fevs, reinsv1.EventType_EVENT_TYPE_FORKED)
	created = ofType(fevs, reinsv1.EventType_EVENT_TYPE_SANDBOX_CREATED)
	if len(forked[0].GetForked().GetSnapshots()) != 0 || created[len(created)-1].GetSandbox().From != "image" {
		t.Errorf("a fork before any checkpoint: %v, %v; want it from the image", forked[0], created[len(created)-1])
	}
}

// TestRunCheckpointReplace: the run's sandbox is removed while step 2's
// command runs; the run goes on in a replacement made from the checkpoint
// after step 1 (a.txt, not the b.txt step 2 wrote), and the replacement's
// event names the snapshot.
func TestRunCheckpointReplace(t *testing.T) {
	s := startService(t)
	script := writeScript(t,
		writeFile("/workspace/a.txt", "A"),
		bash("echo B > /workspace/b.txt; sync; touch /workspace/started; sleep 120"),
		map[string]any{"expect": "checkpoint", "tool_calls": []any{map[string]any{"name": "bash", "input": map[string]any{"command": "ls /workspace"}}}},
		map[string]any{"expect": "a.txt", "text": "carried on"})
	id := strings.TrimSpace(s.must("run", "--detach", "--checkpoint-every", "1", "--model", "script:"+script, "work"))
	sb := runSandbox(t, s, id)
	eventually(t, 60*time.Second, "step 2's command runs", func() (bool, string) {
		r := s.run("sandbox", "exec", sb, "--", "ls", "/workspace")
		return strings.Contains(r.stdout, "started"), r.String()
	})
	s.must("sandbox", "rm", sb)
	waitStatus(t, s, id, "RUN_STATUS_SUCCEEDED")
	evs := runEvents(t, s, s.token, id)
	cps := ofType(evs, reinsv1.EventType_EVENT_TYPE_CHECKPOINT)
	reps := ofType(evs, reinsv1.EventType_EVENT_TYPE_SANDBOX_REPLACED)
	if len(cps) == 0 || len(reps) != 1 {
		t.Fatalf("%d checkpoints, %d replacements", len(cps), len(reps))
	}
	rep, cp := reps[0].GetSandbox(), cps[0].GetCheckpoint()
	if rep.From != "snapshot" || rep.Snapshot != cp.Digest || !strings.Contains(rep.Note, cp.Digest) || rep.Previous != sb {
		t.Errorf("the replacement %v; want it from checkpoint %s of %s, named", rep, cp.Digest, sb)
	}
	res := ofType(evs, reinsv1.EventType_EVENT_TYPE_TOOL_RESULT)
	if ls := res[len(res)-1].GetToolResult().Text; !strings.Contains(ls, "a.txt") || strings.Contains(ls, "b.txt") {
		t.Errorf("the replacement holds %q; want a.txt (checkpointed), not b.txt (written after)", ls)
	}
}

// TestRunParkSuspendRestart: a run parked on approval checkpoints, then
// its sandbox is suspended (its guest and disk gone); the service
// restarts; the approved call runs in a resumed sandbox that has the
// files, and the events name the workspace it resumed on.
func TestRunParkSuspendRestart(t *testing.T) {
	s := startService(t, "--release-after", "1s")
	pol := writePolicy(t, "tools:\n  bash: ask\n")
	script := writeScript(t,
		writeFile("/workspace/kept.txt", "still here"),
		bash("cat /workspace/kept.txt"),
		map[string]any{"expect": "still here", "text": "ok"})
	id := strings.TrimSpace(s.must("run", "--detach", "--policy", pol, "--model", "script:"+script, "wait"))
	waitStatus(t, s, id, "RUN_STATUS_WAITING_APPROVAL")
	sb := runSandbox(t, s, id)
	eventually(t, 60*time.Second, "the parked run's sandbox is suspended", func() (bool, string) {
		show := s.must("sandbox", "show", "--json", sb)
		return strings.Contains(show, "SANDBOX_STATE_SUSPENDED") && strings.Contains(show, `"workspace": "sha256:`), show
	})
	// No guest: nothing of it mounted, no disk.
	for _, m := range mountsUnder(s.dataDir) {
		if strings.Contains(m, sb) {
			t.Errorf("a suspended sandbox left a mount: %s", m)
		}
	}
	if disks, _ := filepath.Glob(filepath.Join(s.dataDir, "*", sb, "disk.img")); len(disks) > 0 {
		t.Errorf("a suspended sandbox kept its disk: %v", disks)
	}
	s.kill9()
	s.start()
	s.must("runs", "approve", id)
	waitStatus(t, s, id, "RUN_STATUS_SUCCEEDED")
	evs := runEvents(t, s, s.token, id)
	cps := ofType(evs, reinsv1.EventType_EVENT_TYPE_CHECKPOINT)
	sus := ofType(evs, reinsv1.EventType_EVENT_TYPE_SANDBOX_SUSPENDED)
	res := ofType(evs, reinsv1.EventType_EVENT_TYPE_SANDBOX_RESUMED)
	if len(cps) == 0 || cps[0].GetCheckpoint().Reason != "before the run parks" || cps[0].Seq > sus[0].Seq {
		t.Errorf("checkpoints %v; want one as the run parked", cps)
	}
	if len(sus) != 1 || len(res) != 1 || sus[0].GetSandbox().Snapshot == "" || res[0].GetSandbox().Snapshot != sus[0].GetSandbox().Snapshot ||
		!strings.Contains(res[0].GetSandbox().Note, sus[0].GetSandbox().Snapshot) {
		t.Errorf("suspended %v, resumed %v; want it resumed on the workspace it was suspended with, named", sus, res)
	}
}

// TestRunSandboxExpires: a run works in a sandbox of its user's with a
// TTL (run --in); while the run waits for an answer, the TTL runs out and
// the sandbox is suspended (ttl_expired); the answered run's next call
// resumes it with its files. The run's log has the expiry warning and the
// suspend as sandbox_lifecycle events, and the resume names the reason and
// the workspace.
func TestRunSandboxExpires(t *testing.T) {
	s := startService(t, "--expiry-warning", "4s", "--release-after", "10m")
	sb := s.create("--ttl", "6s")
	script := writeScript(t,
		writeFile("/workspace/x.txt", "kept"),
		map[string]any{"tool_calls": []any{map[string]any{"name": "ask_human", "input": map[string]any{"question": "go on?"}}}},
		map[string]any{"expect": "yes", "tool_calls": []any{map[string]any{"name": "bash", "input": map[string]any{"command": "cat /workspace/x.txt"}}}},
		map[string]any{"expect": "kept", "text": "done"})
	id := strings.TrimSpace(s.must("run", "--detach", "--in", sb, "--model", "script:"+script, "work, ask, work"))
	waitStatus(t, s, id, "RUN_STATUS_WAITING_APPROVAL")
	eventually(t, 60*time.Second, "the sandbox's TTL suspends it", func() (bool, string) {
		show := s.must("sandbox", "show", "--json", sb)
		return strings.Contains(show, "SANDBOX_STATE_SUSPENDED") && strings.Contains(show, "TTL_EXPIRED"), show
	})
	s.must("runs", "answer", id, "yes")
	waitStatus(t, s, id, "RUN_STATUS_SUCCEEDED")
	evs := runEvents(t, s, s.token, id)
	res := ofType(evs, reinsv1.EventType_EVENT_TYPE_SANDBOX_RESUMED)
	if len(res) != 1 || res[0].GetSandbox().Reason != "ttl_expired" || !strings.HasPrefix(res[0].GetSandbox().Snapshot, "sha256:") {
		t.Errorf("resumed %v; want once, after ttl_expired, on its saved workspace", res)
	}
	var kinds []string
	for _, ev := range ofType(evs, reinsv1.EventType_EVENT_TYPE_SANDBOX_LIFECYCLE) {
		kinds = append(kinds, ev.GetSandbox().Reason)
	}
	if got := strings.Join(kinds, ","); got != "expiring: ttl_expired,suspended: ttl_expired" {
		t.Errorf("the run's sandbox_lifecycle events: %q; want the expiry warning, then the suspend", got)
	}
}
