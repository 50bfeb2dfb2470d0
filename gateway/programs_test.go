package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/reinsdev/reins/internal/testenv"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/model/script"
)

// The real agent programs against the gateway, on the host, a script
// answering: each makes one tool call (a shell command writing a file) and
// then finishes. The binaries are large npm downloads the agents image
// owns; here they are named by REINS_TEST_CLAUDE and REINS_TEST_CODEX
// (the native binaries of @anthropic-ai/claude-code-linux-x64 and
// @openai/codex-linux-x64), and the test does not apply without them.
//
// Each runs three ways: translated (the gateway's target is the script);
// translated and kept alive (the script answers a streamed call only
// once the gateway has opened its stream and pinged it, as for a slow
// model); and forwarded (no target: the call goes as it is, with the real
// key, to a provider that is itself a gateway translating for the
// script, so that the program's own bytes pass through the forward path
// and its parser).
func TestClaudeCodeTurns(t *testing.T) { bothPaths(t, "REINS_TEST_CLAUDE", claudeTurns) }

func TestCodexTurns(t *testing.T) { bothPaths(t, "REINS_TEST_CODEX", codexTurns) }

func bothPaths(t *testing.T, envVar string, turns func(t *testing.T, bin, path string)) {
	bin := os.Getenv(envVar)
	if bin == "" {
		testenv.Missing(t, "%s names no binary (make test sets it: scripts/agent-programs.sh)", envVar)
	}
	for _, path := range []string{"translate", "kept-alive", "forward"} {
		t.Run(path, func(t *testing.T) { turns(t, bin, path) })
	}
}

func claudeTurns(t *testing.T, bin, path string) {
	dir := t.TempDir()
	e := programEnv(t, path,
		script.Turn{ToolCalls: []script.ToolCall{{Name: "Bash", Input: json.RawMessage(`{"command":"echo gateway-ok > out.txt","description":"write a file"}`)}}},
		script.Turn{Text: "done: wrote out.txt"},
	)
	out := runProgram(t, dir, bin, []string{"-p", "write the file", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions"},
		sandboxEnv(e.url, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "IS_SANDBOX=1")...)
	checkProgram(t, e, dir, out, "done: wrote out.txt", WireAnthropic)
}

func codexTurns(t *testing.T, bin, path string) {
	dir := t.TempDir()
	e := programEnv(t, path,
		script.Turn{ToolCalls: []script.ToolCall{{Name: "exec_command", Input: json.RawMessage(`{"cmd":"echo gateway-ok > out.txt"}`)}}},
		script.Turn{Text: "done: wrote out.txt"},
	)
	out := runProgram(t, dir, bin, []string{"exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
		"-c", "model_provider=reins",
		"-c", `model_providers.reins={name="reins",base_url="` + e.url + `/v1",env_key="OPENAI_API_KEY",wire_api="responses"}`,
		"-m", "gpt-5", "write the file"},
		sandboxEnv(e.url)...)
	checkProgram(t, e, dir, out, "done: wrote out.txt", WireOpenAIResponses)
}

// programEnv is a gateway whose calls the script answers, by path.
func programEnv(t *testing.T, path string, turns ...script.Turn) *env {
	t.Helper()
	switch path {
	case "translate":
		e := newEnv(t, envOpts{open: scripted(t, turns...)})
		e.l.set(func(l *ledger) { l.target = Target{Model: "script:turns"} })
		return e
	case "kept-alive":
		a, ev := keepAliveAfter, keepAliveEvery
		keepAliveAfter, keepAliveEvery = time.Millisecond, time.Millisecond
		t.Cleanup(func() { keepAliveAfter, keepAliveEvery = a, ev })
		open := scripted(t, turns...)
		e := newEnv(t, envOpts{open: func(tg Target) (model.Model, string, error) {
			m, name, err := open(tg)
			return gated{m}, name, err
		}})
		e.l.set(func(l *ledger) { l.target = Target{Model: "script:turns"} })
		e.url = serve(t, gate(e.g), "sb1")
		return e
	}
	pl := newLedger()
	pl.set(func(l *ledger) { l.target = Target{Model: "script:turns"} })
	p, err := New(Config{Ledger: pl, Open: scripted(t, turns...),
		Authorize: func(_ context.Context, _, tok string) bool { return tok == realKey }})
	if err != nil {
		t.Fatal(err)
	}
	asProvider := func(w http.ResponseWriter, r *http.Request) {
		p.ServeHTTP(w, r.WithContext(WithSandbox(r.Context(), "provider")))
	}
	return newEnv(t, envOpts{anthropic: asProvider, openai: asProvider})
}

type openedKey struct{}

// gate serves h; a streamed call's context carries a channel closed when
// its first byte is written, for gated.
func gate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var req struct{ Stream bool }
		json.Unmarshal(body, &req)
		if req.Stream {
			fw := &firstWrite{ResponseWriter: w, opened: make(chan struct{})}
			w, r = fw, r.WithContext(context.WithValue(r.Context(), openedKey{}, fw.opened))
		}
		h.ServeHTTP(w, r)
	})
}

type firstWrite struct {
	http.ResponseWriter
	opened chan struct{}
	once   sync.Once
}

func (f *firstWrite) Write(b []byte) (int, error) {
	n, err := f.ResponseWriter.Write(b)
	f.once.Do(func() { close(f.opened) })
	return n, err
}

func (f *firstWrite) Unwrap() http.ResponseWriter { return f.ResponseWriter }

// gated answers a streamed call only once its stream has opened.
type gated struct{ model.Model }

func (g gated) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	if opened, ok := ctx.Value(openedKey{}).(chan struct{}); ok {
		select {
		case <-opened:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.Model.Generate(ctx, req)
}

// sandboxEnv is the environment a sandbox with a gateway gets (Env), its
// base URLs at url instead of Addr.
func sandboxEnv(url string, more ...string) []string {
	var env []string
	for _, kv := range Env(token("sb1")) {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasSuffix(k, "_BASE_URL") {
			v = strings.Replace(v, "http://"+Addr, url, 1)
		}
		env = append(env, k+"="+v)
	}
	return append(env, more...)
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
	t.Logf("%d calls", len(e.l.ends))
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
	finals := 0
	for i, r := range e.l.ends {
		if r.Status != 200 || r.Response == nil || r.Error != "" {
			t.Errorf("call %d: status %d, response %v, error %q", i, r.Status, r.Response, r.Error)
			continue
		}
		for _, b := range r.Response.Content {
			if b.Text == final {
				finals++
			}
		}
	}
	if finals == 0 {
		t.Errorf("no record holds the final answer %q", final)
	}
	for _, u := range []*upstream{e.anthropic, e.openai} {
		u.mu.Lock()
		for _, r := range u.reqs {
			for k, vs := range r.Header {
				if strings.Contains(strings.Join(vs, " "), token("sb1")) {
					t.Errorf("the provider got the sandbox's token in %s", k)
				}
			}
		}
		u.mu.Unlock()
	}
	if !sawResult {
		t.Errorf("no request carried the tool call's result back")
	}
}
