package gateway

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reinsdev/reins/model/script"
)

// The real agent programs against the gateway, on the host, a script
// answering: each makes one tool call (a shell command writing a file) and
// then finishes. The binaries are large npm downloads the agents image
// owns; here they are named by REINS_TEST_CLAUDE and REINS_TEST_CODEX
// (the native binaries of @anthropic-ai/claude-code-linux-x64 and
// @openai/codex-linux-x64), and the test does not apply without them.
func TestClaudeCodeTurns(t *testing.T) {
	bin := os.Getenv("REINS_TEST_CLAUDE")
	if bin == "" {
		t.Skip("not applicable: REINS_TEST_CLAUDE names no Claude Code binary")
	}
	dir := t.TempDir()
	e := newEnv(t, envOpts{open: scripted(t,
		script.Turn{ToolCalls: []script.ToolCall{{Name: "Bash", Input: json.RawMessage(`{"command":"echo gateway-ok > out.txt","description":"write a file"}`)}}},
		script.Turn{Text: "done: wrote out.txt"},
	)})
	e.l.target = Target{Model: "script:turns"}
	out := runProgram(t, dir, bin, []string{"-p", "write the file", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions"},
		"ANTHROPIC_BASE_URL="+e.url, "ANTHROPIC_API_KEY="+token("sb1"), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "IS_SANDBOX=1")
	checkProgram(t, e, dir, out, "done: wrote out.txt", WireAnthropic)
}

func TestCodexTurns(t *testing.T) {
	bin := os.Getenv("REINS_TEST_CODEX")
	if bin == "" {
		t.Skip("not applicable: REINS_TEST_CODEX names no Codex binary")
	}
	dir := t.TempDir()
	e := newEnv(t, envOpts{open: scripted(t,
		script.Turn{ToolCalls: []script.ToolCall{{Name: "exec_command", Input: json.RawMessage(`{"cmd":"echo gateway-ok > out.txt"}`)}}},
		script.Turn{Text: "done: wrote out.txt"},
	)})
	e.l.target = Target{Model: "script:turns"}
	out := runProgram(t, dir, bin, []string{"exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
		"-c", "model_provider=reins",
		"-c", `model_providers.reins={name="reins",base_url="` + e.url + `/v1",env_key="OPENAI_API_KEY",wire_api="responses"}`,
		"-m", "gpt-5", "write the file"},
		"OPENAI_API_KEY="+token("sb1"))
	checkProgram(t, e, dir, out, "done: wrote out.txt", WireOpenAIResponses)
}

func runProgram(t *testing.T, dir, bin string, args []string, env ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"HOME=" + dir, "PATH=" + os.Getenv("PATH")}, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", filepath.Base(bin), err, out)
	}
	return string(out)
}

func checkProgram(t *testing.T, e *env, dir, out, final string, wire Wire) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(dir, "out.txt"))
	if err != nil || strings.TrimSpace(string(got)) != "gateway-ok" {
		t.Fatalf("the tool call did not run (out.txt: %q, %v); program said:\n%s", got, err, out)
	}
	if !strings.Contains(out, final) {
		t.Fatalf("the program did not print the final answer %q:\n%s", final, out)
	}
	e.l.mu.Lock()
	defer e.l.mu.Unlock()
	if len(e.l.ends) < 2 {
		t.Fatalf("ledger recorded %d calls, want at least 2", len(e.l.ends))
	}
	t.Logf("%d calls; program output ends: %.300s", len(e.l.ends), out[max(0, len(out)-300):])
	sawResult := false
	for i, c := range e.l.calls {
		if c.Wire != wire {
			t.Errorf("call %d: wire %s, want %s", i, c.Wire, wire)
		}
		for _, m := range c.Request.Messages {
			for _, b := range m.Content {
				sawResult = sawResult || (b.Type == "tool_result" && b.ToolCallID == "call_0_0")
			}
		}
	}
	for i, r := range e.l.ends {
		if r.Status != 200 || r.Response == nil {
			t.Errorf("call %d: status %d, response %v, error %q", i, r.Status, r.Response, r.Error)
		}
	}
	if !sawResult {
		t.Errorf("no request carried the tool call's result back")
	}
}
