package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
)

func writePolicy(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func runStatus(s *service, id string) string {
	var r map[string]any
	json.Unmarshal([]byte(s.must("runs", "show", "--json", id)), &r)
	st, _ := r["status"].(string)
	return st
}

func waitStatus(t *testing.T, s *service, id, want string) {
	t.Helper()
	if _, ok := reinsv1.RunStatus_value[want]; !ok {
		t.Fatalf("waitStatus: %q is no RunStatus name (the JSON says RUN_STATUS_…)", want)
	}
	eventually(t, 60*time.Second, "run "+id+" "+want, func() (bool, string) {
		st := runStatus(s, id)
		return st == want, st
	})
}

// TestApprovals: a policy holds calls; a person approves (with an edit),
// denies with a reason the model reads, and a restart changes nothing.
func TestApprovals(t *testing.T) {
	s := startService(t)
	pol := writePolicy(t, "tools:\n  bash: ask\n")
	script := writeScript(t,
		bash("echo first"),
		map[string]any{"expect": "edited", "tool_calls": []any{map[string]any{"name": "bash", "input": map[string]any{"command": "echo second"}}}},
		map[string]any{"expect": "not today", "text": "understood"})
	id := strings.TrimSpace(s.must("run", "--detach", "--policy", pol, "--model", "script:"+script, "do things"))
	waitStatus(t, s, id, "RUN_STATUS_WAITING_APPROVAL")
	show := s.must("runs", "show", id)
	if !strings.Contains(show, "pending") || !strings.Contains(show, "echo first") || !strings.Contains(show, "bash") {
		t.Fatalf("runs show lacks the pending call:\n%s", show)
	}
	// A restart changes nothing: still waiting, same pending call.
	s.kill9()
	s.start()
	if st := runStatus(s, id); st != "RUN_STATUS_WAITING_APPROVAL" {
		t.Fatalf("after restart: %s", st)
	}
	// An edit that does not fit the schema is refused, nothing changes.
	if r := s.run("runs", "approve", id, "--edit", `{"cmd": 1}`); r.code == 0 || !strings.Contains(r.stderr, "schema") {
		t.Errorf("bad edit: %s", r)
	}
	s.must("runs", "approve", id, "--edit", `{"command": "echo edited"}`)
	eventually(t, 30*time.Second, "second call held", func() (bool, string) {
		show := s.must("runs", "show", id)
		return strings.Contains(show, "echo second"), show
	})
	s.must("runs", "deny", id, "--reason", "not today")
	waitStatus(t, s, id, "RUN_STATUS_SUCCEEDED")
	ev := s.must("runs", "events", "--json", id)
	for _, want := range []string{`"approval_requested"`, `"approval_decided"`, `"policy_decision"`, `"edited_input_json"`, `not today`} {
		if !strings.Contains(ev, want) {
			t.Errorf("events lack %s", want)
		}
	}
	// Approving a run that waits for nothing is a clear error.
	if r := s.run("runs", "approve", id); r.code != 1 || !strings.Contains(r.stderr, "waits for no approval") {
		t.Errorf("approve of a finished run: %s", r)
	}
	// A malformed policy is refused when the run starts, naming the problem.
	bad := writePolicy(t, "tools:\n  teleport: allow\n")
	if r := s.run("run", "--policy", bad, "--model", "script:"+script, "x"); r.code != 1 || !strings.Contains(r.stderr, "teleport") {
		t.Errorf("bad policy: %s", r)
	}
	bad = writePolicy(t, "tools:\n  bash: maybe\n")
	if r := s.run("run", "--policy", bad, "--model", "script:"+script, "x"); r.code != 1 || !strings.Contains(r.stderr, "maybe") {
		t.Errorf("bad action: %s", r)
	}
}

// TestPauseResumeForkReplay: pause at a safe point and resume where it
// stopped; fork from the middle of a log; replay without calls; verify.
func TestPauseResumeForkReplay(t *testing.T) {
	s := startService(t)
	script := writeScript(t,
		bash("echo one > /workspace/f; sleep 2; cat /workspace/f"),
		map[string]any{"expect": "one", "tool_calls": []any{map[string]any{"name": "bash", "input": map[string]any{"command": "echo two >> /workspace/f; cat /workspace/f"}}}},
		map[string]any{"expect": "two", "text": "finished"})
	id := strings.TrimSpace(s.must("run", "--detach", "--model", "script:"+script, "write"))
	eventually(t, 30*time.Second, "first command starts", func() (bool, string) {
		ev := s.must("runs", "events", id)
		return strings.Contains(ev, "tool_call"), ev
	})
	s.must("runs", "pause", id)
	waitStatus(t, s, id, "RUN_STATUS_PAUSED")
	ev := s.must("runs", "events", "--json", id)
	// Paused after the running call finished: its result is in, the next
	// model call is not.
	if !strings.Contains(ev, `"tool_result"`) || strings.Count(ev, `"model_response"`) != 1 {
		t.Errorf("pause was not at the safe point:\n%s", ev)
	}
	if r := s.run("runs", "pause", id); r.code != 1 || !strings.Contains(r.stderr, "already paused") {
		t.Errorf("second pause: %s", r)
	}
	s.must("runs", "resume", id)
	waitStatus(t, s, id, "RUN_STATUS_SUCCEEDED")

	// Replay renders the log with no calls.
	rep := s.must("runs", "replay", id)
	for _, want := range []string{"▸ bash", "finished", "succeeded"} {
		if !strings.Contains(rep, want) {
			t.Errorf("replay lacks %q:\n%s", want, rep)
		}
	}
	// Fork from after the first result: a new run in a new sandbox with
	// the files of then (the pause's checkpoint), told so.
	var at int64
	for _, line := range strings.Split(strings.TrimSpace(s.must("runs", "events", "--json", id)), "\n") {
		var e struct {
			Seq  wireInt `json:"seq"`
			Type string  `json:"type"`
		}
		json.Unmarshal([]byte(line), &e)
		if e.Type == "EVENT_TYPE_TOOL_RESULT" {
			at = int64(e.Seq)
			break
		}
	}
	if r := s.run("runs", "fork", id, "--at", "99999"); r.code != 1 || !strings.Contains(r.stderr, "events") {
		t.Errorf("fork beyond the log: %s", r)
	}
	// The script plays turn i at step i: the fork's history holds step 1.
	forkScript := writeScript(t, map[string]any{"text": "(step 1 is history)"},
		map[string]any{"expect": "as they were", "tool_calls": []any{map[string]any{"name": "bash", "input": map[string]any{"command": "cat /workspace/f || echo nofile"}}}},
		map[string]any{"expect": "one", "text": "forked and checked"})
	r := s.run("runs", "fork", id, "--at", fmt.Sprint(at), "--model", "script:"+forkScript)
	if r.code != 0 || !strings.Contains(r.stdout, "forked and checked") {
		t.Errorf("fork: %s", r)
	}
	// Verify re-executes the recorded responses against a fresh sandbox:
	// the first command's output is reproduced, so the runs match.
	r = s.run("runs", "replay", "--verify", id)
	if r.code != 0 || !strings.Contains(r.stdout, "verified") {
		t.Errorf("replay --verify: %s", r)
	}
}

// TestWaitingReleasesCompute: a run waiting for approval longer than
// --release-after has its sandbox suspended (no processes, files kept);
// approving starts it again on the same files.
func TestWaitingReleasesCompute(t *testing.T) {
	s := startService(t, "--release-after", "1s")
	pol := writePolicy(t, "tools:\n  bash: ask\n")
	script := writeScript(t,
		map[string]any{"tool_calls": []any{map[string]any{"name": "write_file", "input": map[string]any{"path": "/workspace/kept.txt", "content": "still here"}}}},
		bash("cat /workspace/kept.txt"),
		map[string]any{"expect": "still here", "text": "ok"})
	id := strings.TrimSpace(s.must("run", "--detach", "--policy", pol, "--model", "script:"+script, "wait"))
	waitStatus(t, s, id, "RUN_STATUS_WAITING_APPROVAL")
	eventually(t, 30*time.Second, "the sandbox is suspended", func() (bool, string) {
		ls := s.must("sandbox", "ls", "--label", "reins.run="+id)
		return strings.Contains(ls, "suspended"), ls
	})
	s.must("runs", "approve", id)
	waitStatus(t, s, id, "RUN_STATUS_SUCCEEDED")
	if ev := s.must("runs", "events", id); !strings.Contains(ev, "sandbox_resumed") {
		t.Errorf("no sandbox_resumed event:\n%s", ev)
	}
}
