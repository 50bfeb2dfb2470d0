package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeScript writes a script model and returns its path.
func writeScript(t *testing.T, turns ...map[string]any) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "script.json")
	data, _ := json.Marshal(map[string]any{"turns": turns})
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func bash(cmd string) map[string]any {
	return map[string]any{"tool_calls": []any{map[string]any{"name": "bash", "input": map[string]any{"command": cmd}}}}
}

// TestAgentDemo runs the bundled example the way make demo does: the agent
// finds the failing test in a sandbox, fixes the bug and reruns the tests.
func TestAgentDemo(t *testing.T) {
	s := startService(t)
	id := s.create()
	s.must("sandbox", "cp", filepath.Join(repoRoot(), "examples/fix-the-bug/project"), id+":/workspace/project")
	if r := s.run("sandbox", "exec", id, "--", "sh", "/workspace/project/test.sh"); r.code != 1 {
		t.Fatalf("the example's tests should fail first: %s", r)
	}
	script := filepath.Join(repoRoot(), "examples/fix-the-bug/agent.json")
	r := s.run("run", "--model", "script:"+script, "--in", id, "Find the failing test in /workspace/project, fix the bug, and rerun the tests.")
	if r.code != 0 {
		t.Fatalf("reins run: %s", r)
	}
	for _, want := range []string{"▸ bash", "FAIL mul 2 3", "▸ edit_file", "all four tests pass", "succeeded · 6 steps", "reins runs show run_"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("run output lacks %q:\n%s", want, r.stdout)
		}
	}
	if out := s.must("sandbox", "exec", id, "--", "sh", "/workspace/project/test.sh"); !strings.Contains(out, "ok   mul 4 5") {
		t.Errorf("tests after the run: %s", out)
	}
	// The run is listed, shown and its log readable.
	var runs []map[string]any
	json.Unmarshal([]byte(s.must("runs", "ls", "--json")), &runs)
	if len(runs) != 1 || runs[0]["status"] != "RUN_STATUS_SUCCEEDED" {
		t.Fatalf("runs ls: %v", runs)
	}
	runID := runs[0]["id"].(string)
	if show := s.must("runs", "show", runID); !strings.Contains(show, "succeeded") || !strings.Contains(show, "all four tests pass") {
		t.Errorf("runs show:\n%s", show)
	}
	events := s.must("runs", "events", "--json", runID)
	if n := strings.Count(events, "\n"); n < 15 || !strings.Contains(events, `"type":"EVENT_TYPE_FINISHED"`) {
		t.Errorf("runs events: %d lines\n%s", n, events)
	}
	// The attached sandbox outlives the run.
	if ls := s.must("sandbox", "ls"); !strings.Contains(ls, id) {
		t.Errorf("the run removed the sandbox it was given")
	}
}

// TestRunOptions: --json, --detach, budgets, artifacts, bad input.
func TestRunOptions(t *testing.T) {
	s := startService(t)
	ok := writeScript(t, map[string]any{"tool_calls": []any{
		map[string]any{"name": "bash", "input": map[string]any{"command": "echo hello > /workspace/out.txt && seq 1 50000"}}}},
		map[string]any{"expect": "saved as artifact", "tool_calls": []any{
			map[string]any{"name": "save_artifact", "input": map[string]any{"path": "/workspace/out.txt"}}}},
		map[string]any{"expect": "saved", "text": "done"})
	r := s.run("run", "--json", "--model", "script:"+ok, "make output")
	var res map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || r.code != 0 || res["status"] != "RUN_STATUS_SUCCEEDED" || res["text"] != "done" {
		t.Fatalf("run --json: %s", r)
	}
	runID := res["id"].(string)
	arts := s.must("runs", "artifacts", runID)
	if !strings.Contains(arts, "out.txt") || !strings.Contains(arts, "output-step1-bash.txt") {
		t.Errorf("artifacts:\n%s", arts)
	}
	if got := s.must("runs", "artifacts", runID, "--get", "out.txt"); got != "hello\n" {
		t.Errorf("artifact out.txt = %q", got)
	}
	big := s.must("runs", "artifacts", runID, "--get", "output-step1-bash.txt")
	if !strings.HasSuffix(big, "\n50000\n[exit code 0]") && !strings.Contains(big, "\n50000\n") {
		t.Errorf("the whole output artifact is cut: %d bytes", len(big))
	}
	// The run's own sandbox is deleted when it ends.
	if ls := s.must("sandbox", "ls", "--label", "reins.run="+runID); strings.Count(ls, "\n") > 1 {
		t.Errorf("the run's sandbox outlived it:\n%s", ls)
	}

	// --detach returns at once; the run can be followed and cancelled.
	slow := writeScript(t, bash("sleep 30"), map[string]any{"text": "late"})
	r = s.run("run", "--detach", "--json", "--model", "script:"+slow, "wait")
	var det map[string]string
	if err := json.Unmarshal([]byte(r.stdout), &det); err != nil || !strings.HasPrefix(det["id"], "run_") {
		t.Fatalf("run --detach --json: %s", r)
	}
	eventually(t, 30*time.Second, "the slow command starts", func() (bool, string) {
		ev := s.must("runs", "events", det["id"])
		return strings.Contains(ev, "tool_call"), ev
	})
	t0 := time.Now()
	s.must("runs", "cancel", det["id"])
	if show := s.must("runs", "show", det["id"]); !strings.Contains(show, "cancelled") || time.Since(t0) > 10*time.Second {
		t.Errorf("after cancel (%s):\n%s", time.Since(t0), show)
	}

	// Budgets end a run failed, with the reason; exit 1.
	loop := writeScript(t, bash("true"), bash("true"), bash("true"), bash("true"))
	r = s.run("run", "--max-steps", "2", "--model", "script:"+loop, "loop")
	if r.code != 1 || !strings.Contains(r.stdout, "used all 2 steps") {
		t.Errorf("--max-steps: %s", r)
	}

	// A failed expectation names the turn and what was seen.
	wrong := writeScript(t, bash("echo apples"), map[string]any{"expect": "oranges", "text": "x"})
	r = s.run("run", "--model", "script:"+wrong, "fruit")
	if r.code != 1 || !strings.Contains(r.stdout, "oranges") || !strings.Contains(r.stdout, "apples") {
		t.Errorf("expect mismatch: %s", r)
	}

	// Bad input fails before any sandbox exists.
	before := s.must("sandbox", "ls", "--json")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--model", "nosuch:model", "x"}, `unknown model provider "nosuch"`},
		{[]string{"run", "--model", "script:/no/such.json", "x"}, "/no/such.json"},
		{[]string{"run", "--model", "anthropic:claude-sonnet-4-5", "x"}, "ANTHROPIC_API_KEY"},
		{[]string{"run", "--model", "script:" + ok, "--max-steps", "-1", "x"}, "must not be negative"},
	} {
		r := s.runEnv([]string{"ANTHROPIC_API_KEY="}, c.args...)
		if r.code == 0 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("reins %s: %s\nwant %q", strings.Join(c.args, " "), r, c.want)
		}
	}
	if after := s.must("sandbox", "ls", "--json"); after != before {
		t.Errorf("bad runs made sandboxes:\n%s", after)
	}
}

// TestRunSurvivesKill9: the service is killed while a run's command runs;
// on restart the run continues, the command is not run twice, and the run
// succeeds.
func TestRunSurvivesKill9(t *testing.T) {
	s := startService(t)
	script := writeScript(t,
		bash("echo run >> /workspace/count; sleep 3; echo slept"),
		map[string]any{"expect": "slept", "tool_calls": []any{map[string]any{"name": "bash", "input": map[string]any{"command": "cat /workspace/count"}}}},
		map[string]any{"expect": "run", "text": "counted"})
	r := s.run("run", "--detach", "--model", "script:"+script, "count")
	runID := strings.TrimSpace(r.stdout)
	eventually(t, 30*time.Second, "the command starts", func() (bool, string) {
		ev := s.must("runs", "events", runID)
		return strings.Contains(ev, "tool_call"), ev
	})
	s.kill9()
	time.Sleep(500 * time.Millisecond)
	s.start()
	eventually(t, 60*time.Second, "the run finishes after the restart", func() (bool, string) {
		show := s.must("runs", "show", runID)
		return strings.Contains(show, "succeeded") || strings.Contains(show, "failed"), show
	})
	show := s.must("runs", "show", runID)
	if !strings.Contains(show, "succeeded") || !strings.Contains(show, "counted") {
		t.Fatalf("after restart:\n%s\n%s", show, s.must("runs", "events", runID))
	}
	ev := s.must("runs", "events", "--json", runID)
	if strings.Count(ev, `"type":"EVENT_TYPE_TOOL_RESULT"`) != 2 {
		t.Errorf("want 2 tool results:\n%s", ev)
	}
	// cat /workspace/count printed one line: the command ran once.
	if !strings.Contains(ev, `run\n[exit code 0]`) || strings.Contains(ev, `run\nrun`) {
		t.Errorf("the first command ran other than once:\n%s", ev)
	}
}

// TestTrustedTools: tools configured in reins serve's --config run in the
// service with their credentials; the model sees results, never secrets.
func TestTrustedTools(t *testing.T) {
	requireSandboxes(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "crm.db")
	if out, err := exec.Command("go", "run", filepath.Join(repoRoot(), "test/e2e/testdata/mkdb.go"), db).CombinedOutput(); err != nil {
		t.Fatalf("making the database: %v\n%s", err, out)
	}
	var gotAuth string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		fmt.Fprint(w, `{"weather":"sunny"}`)
	}))
	defer api.Close()
	host := strings.TrimPrefix(api.URL, "http://")
	cfg := filepath.Join(dir, "config.json")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`{
		"sql": [{"name": "crm", "url": "sqlite:%s"}],
		"http": {"allowed_hosts": [%q], "secrets": {%q: {"Authorization": "env:E2E_API_AUTH"}}}
	}`, db, host, host)), 0o644)
	t.Setenv("E2E_API_AUTH", "Bearer s3cret")
	s := startService(t, "--config", cfg)
	script := writeScript(t,
		map[string]any{"tool_calls": []any{map[string]any{"name": "sql_query", "input": map[string]any{"query": "SELECT name FROM customers ORDER BY name"}}}},
		map[string]any{"expect": "alice", "tool_calls": []any{map[string]any{"name": "sql_query", "input": map[string]any{"query": "DELETE FROM customers"}}}},
		map[string]any{"expect": "writes are disabled", "tool_calls": []any{map[string]any{"name": "http_request", "input": map[string]any{"method": "GET", "url": api.URL + "/weather"}}}},
		map[string]any{"expect": "sunny", "tool_calls": []any{map[string]any{"name": "http_request", "input": map[string]any{"method": "GET", "url": "http://example.com/"}}}},
		map[string]any{"expect": "not allowed", "text": "done"})
	// Without a waiver the trifecta rule holds http_request once the run
	// has read the database (untrusted content).
	id := strings.TrimSpace(s.must("run", "--detach", "--model", "script:"+script, "query things"))
	waitStatus(t, s, id, "RUN_STATUS_WAITING_APPROVAL")
	if show := s.must("runs", "show", id); !strings.Contains(show, "trifecta") || !strings.Contains(show, "http_request") {
		t.Errorf("the trifecta rule did not hold http_request:\n%s", show)
	}
	s.must("runs", "cancel", id)
	waiver := writePolicy(t, "trifecta:\n  waive: [http_request]\n")
	r := s.run("run", "--policy", waiver, "--model", "script:"+script, "query things")
	if r.code != 0 {
		t.Fatalf("run: %s", r)
	}
	if gotAuth != "Bearer s3cret" {
		t.Errorf("the secret header reached the API as %q", gotAuth)
	}
	if strings.Contains(r.stdout, "s3cret") {
		t.Errorf("the secret leaked into the run's output:\n%s", r.stdout)
	}
}
