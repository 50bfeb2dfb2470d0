package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/reinsdev/reins/internal/testenv"
)

// Agent programs in the box: the real Claude Code and Codex from npm (in
// the agents image) run in a gVisor sandbox with no network, calling
// models only through the gateway, a script answering. The service holds
// "real" keys; the sandbox must never see them.

const (
	fakeAnthropicKey = "sk-ant-e2e-REALKEY-0123456789"
	fakeOpenAIKey    = "sk-e2e-REALKEY-9876543210"
)

// agentService is a service holding provider keys (which no call uses:
// the runs' models are scripts) to hunt for in sandboxes.
func agentService(t *testing.T) *service {
	t.Helper()
	testenv.RequiresBinary(t, "debootstrap", "debootstrap")
	return startServiceEnv(t, []string{"ANTHROPIC_API_KEY=" + fakeAnthropicKey, "OPENAI_API_KEY=" + fakeOpenAIKey})
}

// gatewayCalls are a run's model calls made through the gateway, as its
// events say (the API's JSON shape).
type gatewayCall struct {
	Step    int `json:"step"`
	Content []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		ToolName string `json:"tool_name"`
	} `json:"content"`
	Usage struct {
		InputTokens  wireInt `json:"input_tokens"`
		OutputTokens wireInt `json:"output_tokens"`
	} `json:"usage"`
	Gateway struct {
		Wire   string `json:"wire"`
		Status int    `json:"status"`
		Model  string `json:"model"`
		Error  string `json:"error"`
	} `json:"gateway"`
}

func gatewayCalls(t *testing.T, s *service, runID string) []gatewayCall {
	t.Helper()
	var evs []struct {
		Type          string          `json:"type"`
		ModelResponse json.RawMessage `json:"model_response"`
	}
	out := s.must("runs", "events", "--json", runID)
	dec := json.NewDecoder(strings.NewReader(out)) // one event per line
	for dec.More() {
		var ev struct {
			Type          string          `json:"type"`
			ModelResponse json.RawMessage `json:"model_response"`
		}
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("runs events --json: %v\n%s", err, out)
		}
		evs = append(evs, ev)
	}
	var calls []gatewayCall
	for _, ev := range evs {
		if ev.ModelResponse == nil {
			continue
		}
		var c gatewayCall
		if err := json.Unmarshal(ev.ModelResponse, &c); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
	}
	return calls
}

// noRealKey hunts for the service's keys in sandbox id: in every
// process's environment and in every file outside /proc and /sys.
func noRealKey(t *testing.T, s *service, id string) {
	t.Helper()
	for _, key := range []string{fakeAnthropicKey, fakeOpenAIKey} {
		r := s.run("sandbox", "exec", id, "--", "sh", "-c",
			"cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c -F \"$0\"; "+
				"grep -rlsF --exclude-dir=proc --exclude-dir=sys \"$0\" / | head -5", key)
		if strings.TrimSpace(r.stdout) != "0" {
			t.Errorf("the service's key %q is in the sandbox: %s", key, r)
		}
	}
	r := s.run("sandbox", "exec", id, "--", "sh", "-c", `printf %s "$ANTHROPIC_API_KEY|$OPENAI_API_KEY"`)
	toks := strings.Split(r.stdout, "|")
	if len(toks) != 2 || !strings.HasPrefix(toks[0], "rgw_") || toks[0] != toks[1] {
		t.Errorf("the sandbox's key variables hold %q, want one placeholder token rgw_…", r.stdout)
	}
}

func runOf(t *testing.T, s *service, r result) string {
	t.Helper()
	var v struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v.ID == "" {
		t.Fatalf("run --json: %s", r)
	}
	return v.ID
}

// TestClaudeCodeInBox: Claude Code calls its Bash tool once (writing a
// file the test reads back) and finishes; the run succeeds, its log holds
// both model exchanges with usage, and the sandbox held only the
// placeholder token.
func TestClaudeCodeInBox(t *testing.T) {
	programInBox(t, "claude-code", "anthropic", "Bash", func(cmd string) map[string]any {
		return map[string]any{"command": cmd, "description": "write the proof"}
	})
}

// TestCodexInBox: the same with the real Codex CLI over the Responses
// wire; its shell tool is exec_command.
func TestCodexInBox(t *testing.T) {
	programInBox(t, "codex", "openai_responses", "exec_command", func(cmd string) map[string]any {
		return map[string]any{"cmd": cmd}
	})
}

// programInBox runs agent in a gVisor sandbox with no network, a script
// making it call tool (its input built by input) once and then finish.
func programInBox(t *testing.T, agent, wire, tool string, input func(cmd string) map[string]any) {
	s := agentService(t)
	id := s.create("--backend", "gvisor", "--image", "agents", "--memory", "2G", "--network", "none", "--model-gateway")
	proof := agent + "-was-here"
	script := writeScript(t,
		map[string]any{"tool_calls": []any{map[string]any{"name": tool,
			"input": input("echo " + proof + " > /tmp/proof.txt && cat /tmp/proof.txt")}}},
		map[string]any{"expect": proof, "text": "done: the proof is written"})
	r := s.run("run", "--json", "--agent", agent, "--in", id, "--model", "script:"+script, "write the proof")
	runID := runOf(t, s, r)
	if !strings.Contains(r.stdout, `"status": "RUN_STATUS_SUCCEEDED"`) {
		t.Fatalf("%s run: %s\n%s", agent, r, s.must("runs", "events", runID))
	}
	if got := strings.TrimSpace(s.must("sandbox", "exec", id, "--", "cat", "/tmp/proof.txt")); got != proof {
		t.Errorf("the file %s's %s tool wrote holds %q", agent, tool, got)
	}
	checkTwoCalls(t, s, runID, wire, tool)
	if show := s.must("runs", "show", runID); !strings.Contains(show, "done: the proof is written") {
		t.Errorf("runs show lacks the final answer:\n%s", show)
	}
	noRealKey(t, s, id)
}

// checkTwoCalls: the run's log has the two model exchanges, in the wire
// the program spoke, each answered 200 with usage; the first called tool.
func checkTwoCalls(t *testing.T, s *service, runID, wire, tool string) {
	t.Helper()
	calls := gatewayCalls(t, s, runID)
	if len(calls) != 2 {
		t.Fatalf("%d model calls in the log, want 2:\n%s", len(calls), s.must("runs", "events", runID))
	}
	for i, c := range calls {
		if c.Gateway.Wire != wire || c.Gateway.Status != 200 || !strings.HasPrefix(c.Gateway.Model, "script:") {
			t.Errorf("call %d: wire %q status %d model %q, want %s 200 script:…", i+1, c.Gateway.Wire, c.Gateway.Status, c.Gateway.Model, wire)
		}
		if c.Usage.InputTokens <= 0 || c.Usage.OutputTokens <= 0 {
			t.Errorf("call %d has no usage: %+v", i+1, c.Usage)
		}
	}
	if len(calls[0].Content) == 0 || calls[0].Content[0].ToolName != tool {
		t.Errorf("the first call's answer is %+v, want a %s call", calls[0].Content, tool)
	}
}

// TestAgentRunSteering: a script that never stops is ended by --max-steps
// with the reason; cancel kills the program mid-run; pause holds it at its
// next model call and resume lets it finish; a kill -9 of the service
// loses nothing. Claude Code is the program.
func TestAgentRunSteering(t *testing.T) {
	s := agentService(t)
	id := s.create("--backend", "gvisor", "--image", "agents", "--memory", "2G", "--network", "none", "--model-gateway")
	loop := func(cmd string, n int) []map[string]any {
		var turns []map[string]any
		for i := 0; i < n; i++ {
			turns = append(turns, map[string]any{"tool_calls": []any{map[string]any{"name": "Bash",
				"input": map[string]any{"command": fmt.Sprintf(cmd, i), "description": "step"}}}})
		}
		return turns
	}
	t.Run("max-steps", func(t *testing.T) {
		script := writeScript(t, loop("echo step %d", 20)...)
		r := s.run("run", "--json", "--agent", "claude-code", "--in", id, "--model", "script:"+script, "--max-steps", "3", "never stop")
		runID := runOf(t, s, r)
		if !strings.Contains(r.stdout, `"status": "RUN_STATUS_FAILED"`) || !strings.Contains(strings.ToLower(r.stdout), "max steps") {
			t.Errorf("a never-ending script under --max-steps 3: %s", r)
		}
		if n := len(gatewayCalls(t, s, runID)); n < 3 || n > 4 {
			t.Errorf("%d calls recorded, want the 3 admitted (and at most the refused one)", n)
		}
		noProgram(t, s, id, "claude")
	})
	t.Run("cancel", func(t *testing.T) {
		script := writeScript(t, loop("while :; do sleep 1; done # reinswait %d", 2)...)
		runID := strings.TrimSpace(s.must("run", "-d", "--agent", "claude-code", "--in", id, "--model", "script:"+script, "sleep"))
		eventually(t, 120*time.Second, "the program's sleep", func() (bool, string) {
			r := s.run("sandbox", "exec", id, "--", "sh", "-c", "grep -l '[r]einswait' /proc/[0-9]*/cmdline 2>/dev/null | wc -l")
			return strings.TrimSpace(r.stdout) != "0", r.String()
		})
		s.must("runs", "cancel", runID)
		waitStatus(t, s, runID, "RUN_STATUS_CANCELLED")
		eventually(t, 30*time.Second, "the program and its children gone", func() (bool, string) {
			r := s.run("sandbox", "exec", id, "--", "sh", "-c", "grep -lE '[r]einswait|[c]laude' /proc/[0-9]*/cmdline 2>/dev/null | wc -l")
			return strings.TrimSpace(r.stdout) == "0", r.String()
		})
	})
	t.Run("pause-resume", func(t *testing.T) {
		script := writeScript(t,
			map[string]any{"tool_calls": []any{map[string]any{"name": "Bash",
				"input": map[string]any{"command": "while [ ! -e /tmp/go ]; do sleep 0.2; done; echo went", "description": "wait"}}}},
			map[string]any{"expect": "went", "text": "finished after the pause"})
		s.run("sandbox", "exec", id, "--", "rm", "-f", "/tmp/go")
		runID := strings.TrimSpace(s.must("run", "-d", "--agent", "claude-code", "--in", id, "--model", "script:"+script, "wait, then finish"))
		eventually(t, 120*time.Second, "the first call", func() (bool, string) {
			n := len(gatewayCalls(t, s, runID))
			return n == 1, fmt.Sprint(n, " calls")
		})
		s.must("runs", "pause", runID)
		s.must("sandbox", "exec", id, "--", "touch", "/tmp/go")
		waitStatus(t, s, runID, "RUN_STATUS_PAUSED")
		// Held: the second call does not happen while paused.
		time.Sleep(3 * time.Second)
		if n := len(gatewayCalls(t, s, runID)); n != 1 {
			t.Fatalf("%d calls recorded while paused, want 1", n)
		}
		s.must("runs", "resume", runID)
		waitStatus(t, s, runID, "RUN_STATUS_SUCCEEDED")
		if show := s.must("runs", "show", runID); !strings.Contains(show, "finished after the pause") {
			t.Errorf("runs show after resume:\n%s", show)
		}
	})
	t.Run("restart", func(t *testing.T) {
		// kill -9 of the service while the program runs: the program goes
		// on in its sandbox, and its next call is served by the next
		// service, which finishes the run.
		script := writeScript(t,
			map[string]any{"tool_calls": []any{map[string]any{"name": "Bash",
				"input": map[string]any{"command": "while [ ! -e /tmp/go2 ]; do sleep 0.2; done; echo went on", "description": "wait"}}}},
			map[string]any{"expect": "went on", "text": "finished across a restart"})
		runID := strings.TrimSpace(s.must("run", "-d", "--agent", "claude-code", "--in", id, "--model", "script:"+script, "wait across a restart"))
		eventually(t, 120*time.Second, "the first call", func() (bool, string) {
			n := len(gatewayCalls(t, s, runID))
			return n == 1, fmt.Sprint(n, " calls")
		})
		s.kill9()
		s.start()
		s.must("sandbox", "exec", id, "--", "touch", "/tmp/go2")
		waitStatus(t, s, runID, "RUN_STATUS_SUCCEEDED")
		if show := s.must("runs", "show", runID); !strings.Contains(show, "finished across a restart") {
			t.Errorf("runs show after a restart:\n%s", show)
		}
	})
}

// noProgram waits until no process named name runs in sandbox id.
func noProgram(t *testing.T, s *service, id, name string) {
	t.Helper()
	eventually(t, 30*time.Second, name+" gone", func() (bool, string) {
		r := s.run("sandbox", "exec", id, "--", "sh", "-c", "grep -l '["+name[:1]+"]"+name[1:]+"' /proc/[0-9]*/cmdline 2>/dev/null | wc -l")
		return strings.TrimSpace(r.stdout) == "0", r.String()
	})
}

// TestGatewayTokenIsTheSandboxs: a sandbox's placeholder token is good
// only from that sandbox: from another sandbox it is refused, and after
// its sandbox is gone too.
func TestGatewayTokenIsTheSandboxs(t *testing.T) {
	s := agentService(t)
	script := writeScript(t, map[string]any{"text": "hello"})
	a := s.create("--backend", "gvisor", "--image", "agents", "--network", "none", "--model-gateway", "--model", "script:"+script)
	b := s.create("--backend", "gvisor", "--image", "agents", "--network", "none", "--model-gateway", "--model", "script:"+script)
	tokA := strings.TrimSpace(s.must("sandbox", "exec", a, "--", "sh", "-c", `printf %s "$ANTHROPIC_API_KEY"`))
	status := func(id, tok string) string {
		r := s.run("sandbox", "exec", id, "--", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
			"-H", "x-api-key: "+tok, "-H", "content-type: application/json", "http://127.0.0.1:47070/v1/messages/count_tokens",
			"-d", `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`)
		return r.stdout
	}
	if got := status(a, tokA); got != "200" {
		t.Errorf("sandbox A with its own token: HTTP %q, want it accepted", got)
	}
	if got := status(b, tokA); got != "401" {
		t.Errorf("sandbox B with A's token: HTTP %q, want 401", got)
	}
	s.must("sandbox", "rm", a)
	if got := status(b, tokA); got != "401" {
		t.Errorf("A's token after A is gone, from B: HTTP %q, want 401", got)
	}
}
