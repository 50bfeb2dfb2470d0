package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reinsdev/reins/agent"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/gateway"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/store"
)

// These tests run agent runs (Spec.Agent) over the real log and real
// executors (hostSandboxes): the programs are cmd: programs that really
// run, in their own process groups, and the tests call the Ledger (Begin,
// End) as the model gateway does.

// gwSandboxes gives hostSandboxes a model gateway as the manager does: an
// environment for the program and, per sandbox, its tenant and model.
type gwSandboxes struct {
	*hostSandboxes
	mu       sync.Mutex
	enabled  map[string]int
	memory   map[string]int64
	released map[string]int // Release calls, by run
	// path, when set, is put first in the programs' PATH (fake agent
	// programs).
	path string
}

func newGWSandboxes(t *testing.T, h *hostSandboxes) *gwSandboxes {
	return &gwSandboxes{hostSandboxes: h, enabled: map[string]int{}, memory: map[string]int64{}, released: map[string]int{}}
}

func (g *gwSandboxes) Release(ctx context.Context, runID string) {
	g.mu.Lock()
	g.released[runID]++
	g.mu.Unlock()
	g.hostSandboxes.Release(ctx, runID)
}

func (g *gwSandboxes) EnableGateway(ctx context.Context, id string) ([]string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.enabled[id]++
	env := gateway.Env(gateway.TokenPrefix + "test-" + id)
	if g.path != "" {
		env = append(env, "PATH="+g.path+":/usr/bin:/bin")
	}
	return env, nil
}

func (g *gwSandboxes) GatewayOf(ctx context.Context, id string) (string, string, string, error) {
	if _, err := g.client(id); err != nil {
		return "", "", "", err
	}
	return "acme", "script:sandbox-model", `{"turns":[]}`, nil
}

func (g *gwSandboxes) CreateWithMemory(ctx context.Context, runID, name, image string, memory int64) (string, error) {
	id, err := g.Create(ctx, runID, name, image)
	g.mu.Lock()
	g.memory[id] = memory
	g.mu.Unlock()
	return id, err
}

type agentEnv struct {
	*env
	gws *gwSandboxes
}

func newAgentEnv(t *testing.T) *agentEnv {
	e := newEnv(t)
	return &agentEnv{env: e, gws: newGWSandboxes(t, e.sbs)}
}

func (e *agentEnv) engine() *agent.Engine { return e.engineWithGrace(300 * time.Millisecond) }

// engineWithGrace is an engine whose ended runs' programs have grace to
// exit before they are stopped.
func (e *agentEnv) engineWithGrace(grace time.Duration) *agent.Engine {
	scripts := e.engineModels()
	models := func(spec agent.ModelSpec) (model.Model, string, error) {
		if provider, name, _ := strings.Cut(spec.Model, ":"); provider == "anthropic" || provider == "openai" {
			return nil, name, nil // the gateway forwards these; Start only checks them
		}
		return scripts(spec)
	}
	eng, err := agent.New(agent.Config{Store: e.st, Blobs: e.blobs, Sandboxes: e.gws, Models: models,
		AgentGrace: grace})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(eng.Close)
	return eng
}

// start starts an agent run of spec and returns its id.
func (e *agentEnv) start(eng *agent.Engine, spec runlog.Spec) string {
	e.t.Helper()
	id, err := eng.Start(context.Background(), "", spec)
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

// started waits for run id's program to be running and returns the
// sandbox it runs in.
func (e *agentEnv) started(id string) string {
	e.t.Helper()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		evs, err := e.st.Events(context.Background(), id, 0, 1000)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Type == runlog.EventAgentStarted {
				var p runlog.AgentProgram
				json.Unmarshal(ev.Data, &p)
				return p.Sandbox
			}
			if ev.Type == runlog.EventFinished {
				e.t.Fatalf("run %s finished before its program started: %s", id, ev.Data)
			}
		}
	}
	e.t.Fatalf("run %s: its program did not start", id)
	return ""
}

// gwCall is one model call through the ledger, as the gateway makes it.
func gwCall(t *testing.T, eng *agent.Engine, sb string, newText string) (gateway.Admission, error) {
	t.Helper()
	req := &model.Request{System: "be brief", Messages: []model.Message{
		{Role: model.RoleUser, Content: []model.Block{{Type: model.BlockText, Text: "task"}}},
		{Role: model.RoleAssistant, Content: []model.Block{{Type: model.BlockToolUse, ToolCallID: "t1", ToolName: "Bash", Input: json.RawMessage(`{"command":"ls"}`)}}},
		{Role: model.RoleUser, Content: []model.Block{{Type: model.BlockToolResult, ToolCallID: "t1", Text: newText}}},
	}, Tools: []model.ToolSpec{{Name: "Bash"}}}
	return eng.Begin(context.Background(), gateway.Call{Sandbox: sb, Wire: gateway.WireAnthropic, Model: "claude-sonnet-4-5", Stream: true, Request: req})
}

func endOK(adm gateway.Admission, text string) {
	adm.Entry.End(context.Background(), gateway.Result{Status: 200, FirstByte: 3 * time.Millisecond, Duration: 20 * time.Millisecond,
		Upstream: "anthropic:claude-sonnet-4-5", Response: &model.Response{
			Content:    []model.Block{{Type: model.BlockText, Text: text}},
			StopReason: model.StopEndTurn, Usage: model.Usage{InputTokens: 1000, OutputTokens: 100, CacheReadTokens: 500}}})
}

func eventsOf(evs []store.Event, typ string) []store.Event {
	var out []store.Event
	for _, ev := range evs {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

func finishedOf(t *testing.T, evs []store.Event) runlog.Finished {
	t.Helper()
	if len(evs) == 0 || evs[len(evs)-1].Type != runlog.EventFinished {
		t.Fatalf("the log does not end with finished: %v", types(evs))
	}
	var f runlog.Finished
	json.Unmarshal(evs[len(evs)-1].Data, &f)
	return f
}

// procsWith lists the host's processes whose command line (argv joined
// by NULs) holds marker.
func procsWith(marker string) []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte(marker)) {
			continue
		}
		// A zombie has an empty command line; this one runs.
		out = append(out, p+": "+strings.ReplaceAll(string(b), "\x00", " "))
	}
	return out
}

// killProcsWith kills what procsWith finds (a test's own program, left
// by a failure).
func killProcsWith(marker string) {
	for _, p := range procsWith(marker) {
		pid, _, _ := strings.Cut(strings.TrimPrefix(p, "/proc/"), "/")
		if n, err := strconv.Atoi(pid); err == nil {
			syscall.Kill(n, syscall.SIGKILL)
		}
	}
}

func TestAgentRunMaxStepsRefusesAndEnds(t *testing.T) {
	e := newAgentEnv(t)
	eng := e.engine()
	marker := fmt.Sprint(400000 + rand.IntN(100000))
	id := e.start(eng, runlog.Spec{Task: "loop forever", Agent: "cmd:sleep " + marker, MaxSteps: 3})
	sb := e.started(id)
	for i := range 3 {
		adm, err := gwCall(t, eng, sb, fmt.Sprintf("output %d", i))
		if err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		if adm.Target.Model != "" {
			t.Errorf("target %+v: a run without a model forwards each call as asked", adm.Target)
		}
		endOK(adm, fmt.Sprintf("answer %d", i))
	}
	_, err := gwCall(t, eng, sb, "output 4")
	var ref *gateway.Refusal
	if !errors.As(err, &ref) || ref.Status != http.StatusForbidden || ref.Type != "permission_error" || !strings.Contains(ref.Message, "max steps reached") {
		t.Fatalf("4th call: %v (%#v)", err, ref)
	}
	// The program is killed after the grace and the run stays failed
	// for the budget.
	row, evs := e.finish(eng, id)
	f := finishedOf(t, evs)
	if row.Status != "failed" || f.Status != runlog.StatusFailed || !strings.Contains(f.Reason, "max steps reached: the run made 3 model calls") {
		t.Fatalf("run %s: %s %+v", id, row.Status, f)
	}
	if p := procsWith("sleep\x00" + marker); len(p) > 0 {
		t.Errorf("the program still runs after its run ended: %v", p)
	}
	mrs := eventsOf(evs, runlog.EventModelResponse)
	if len(mrs) != 3 {
		t.Fatalf("%d model responses recorded, want 3: %v", len(mrs), types(evs))
	}
	var mr runlog.ModelResponse
	json.Unmarshal(mrs[2].Data, &mr)
	g := mr.Gateway
	if mr.Step != 3 || g == nil || g.Sandbox != sb || g.Wire != "anthropic" || g.Asked != "claude-sonnet-4-5" || g.Model != "anthropic:claude-sonnet-4-5" ||
		g.Status != 200 || g.FirstMS != 3 || g.Messages != 3 || g.Tools != 1 || g.SystemChars != 8 || len(g.New) != 1 || g.New[0].Text != "output 2" {
		t.Errorf("recorded call: %+v gateway %+v", mr, g)
	}
	// 1000 in, 100 out, 500 cache read at sonnet's price.
	if want := (1000*3 + 100*15 + 500*0.3) / 1e6; mr.CostUSD < want*0.999 || mr.CostUSD > want*1.001 || mr.Usage.CacheReadTokens != 500 {
		t.Errorf("cost %v usage %+v, want %v", mr.CostUSD, mr.Usage, want)
	}
	if sum := summary(t, row); sum.Steps != 3 || sum.Cost == 0 {
		t.Errorf("summary %+v", sum)
	}
	// Every call after the end is refused, the run named.
	if _, err := gwCall(t, eng, sb, "again"); !errors.As(err, &ref) || !strings.Contains(ref.Message, id) {
		t.Errorf("a call after the end: %v", err)
	}
	// On OpenAI's wire the refusal is the 400 Codex does not retry.
	_, err = eng.Begin(context.Background(), gateway.Call{Sandbox: sb, Wire: gateway.WireOpenAIResponses, Model: "gpt-4.1"})
	if !errors.As(err, &ref) || ref.Status != http.StatusBadRequest || ref.Type != "invalid_request_error" {
		t.Errorf("a call on OpenAI's wire after the end: %v (%#v)", err, ref)
	}
	if _, err := eng.Fork(context.Background(), "", id, 2, "", ""); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("forking an agent run: %v", err)
	}
	if _, err := eng.Verify(context.Background(), "", id); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("verifying an agent run: %v", err)
	}
	if e.gws.memory[sb] != runlog.DefaultAgentMemory || e.gws.enabled[sb] != 1 {
		t.Errorf("sandbox made with %d bytes, gateway enabled %d times", e.gws.memory[sb], e.gws.enabled[sb])
	}
}

func TestAgentRunPauseHoldsTheNextCall(t *testing.T) {
	e := newAgentEnv(t)
	eng := e.engine()
	id := e.start(eng, runlog.Spec{Task: "x", Agent: "cmd:sleep 600"})
	sb := e.started(id)
	if err := eng.Pause(context.Background(), "", id); err != nil {
		t.Fatal(err)
	}
	if row, _ := e.st.GetRun(context.Background(), "", id); row.Status != "paused" {
		t.Fatalf("status after pause: %s", row.Status)
	}
	// Reading a paused agent run (the API's GetRun asks for its pending
	// approvals) does not wait for its worker, which follows the program.
	pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
	if p, err := eng.PendingApprovals(pctx, "", id); err != nil || len(p) != 0 {
		t.Errorf("pending approvals of a paused agent run: %v, %v", p, err)
	}
	pcancel()
	got := make(chan error, 1)
	go func() {
		adm, err := gwCall(t, eng, sb, "held")
		if err == nil {
			endOK(adm, "after resume")
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a call of a paused run went through: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	// A held call whose program gives up is let go.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := eng.Begin(ctx, gateway.Call{Sandbox: sb, Wire: gateway.WireOpenAIResponses, Model: "gpt-4.1"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a held call whose context ended: %v", err)
	}
	if err := eng.Resume(context.Background(), "", id); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the held call after resume: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("resume did not let the held call through")
	}
	evs, _ := e.st.Events(context.Background(), id, 0, 1000)
	if ts := types(evs); !strings.Contains(strings.Join(ts, ","), "paused,resumed,model_response") {
		t.Errorf("events %v", ts)
	}
	if err := eng.Cancel(context.Background(), "", id); err != nil {
		t.Fatal(err)
	}
}

func TestAgentRunCancelKillsTheProcessGroup(t *testing.T) {
	e := newAgentEnv(t)
	eng := e.engine()
	marker := fmt.Sprint(500000 + rand.IntN(100000))
	// The program and a child of its own, which the group kill reaches.
	id := e.start(eng, runlog.Spec{Task: "x",
		Agent: fmt.Sprintf("cmd:sleep %s1 & sleep %s2; wait", marker, marker)})
	sb := e.started(id)
	for end := time.Now().Add(10 * time.Second); len(procsWith("sleep\x00"+marker)) < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the program's processes did not show: %v", procsWith("sleep\x00"+marker))
		}
	}
	t0 := time.Now()
	if err := eng.Cancel(context.Background(), "", id); err != nil {
		t.Fatal(err)
	}
	row, evs := e.finish(eng, id)
	if f := finishedOf(t, evs); row.Status != "cancelled" || f.Reason != "cancelled by a user" || time.Since(t0) > 8*time.Second {
		t.Fatalf("cancel: %s %+v after %s", row.Status, f, time.Since(t0))
	}
	var left []string
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if left = procsWith("sleep\x00" + marker); len(left) == 0 || time.Now().After(end) {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("processes still run after cancel: %v", left)
	}
	var ref *gateway.Refusal
	if _, err := gwCall(t, eng, sb, "late"); !errors.As(err, &ref) || !strings.Contains(ref.Message, "cancelled") {
		t.Errorf("a call after cancel: %v", err)
	}
}

func TestAgentRunStatusFollowsTheProgram(t *testing.T) {
	e := newAgentEnv(t)
	eng := e.engine()
	for _, c := range []struct {
		program, status, text, reason string
	}{
		{`echo "all done"`, "succeeded", "all done", ""},
		{`echo "$REINS_TASK" >&2; echo two >&2; echo three >&2; echo four >&2; echo five >&2; echo six >&2; exit 3`, "failed", "",
			"exit code 3: two\nthree\nfour\nfive\nsix"},
		{`echo 'FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory' >&2; kill -ABRT $$`, "failed", "",
			"aborted: JavaScript heap out of memory"},
		{`kill -TERM $$`, "failed", "", "exit code 143 (signal 15, terminated)"},
		{`echo "the program's own words"; exit 2`, "failed", "", "exit code 2: the program's own words"},
		{`test "$TMPDIR" = /var/tmp && test -d "$TMPDIR" && test -n "$ANTHROPIC_BASE_URL" && printf %s "$OPENAI_API_KEY"`, "succeeded", "rgw_test-", ""},
	} {
		id := e.start(eng, runlog.Spec{Task: "the task", Agent: "cmd:" + c.program})
		row, evs := e.finish(eng, id)
		f := finishedOf(t, evs)
		if row.Status != c.status || !strings.HasPrefix(f.Text, c.text) || !strings.HasPrefix(f.Reason, c.reason) {
			t.Errorf("%s: %s text %q reason %q; want %s %q %q", c.program, row.Status, f.Text, f.Reason, c.status, c.text, c.reason)
		}
	}
}

func TestAgentRunSurvivesARestart(t *testing.T) {
	e := newAgentEnv(t)
	eng := e.engine()
	// It waits for a file the test makes once the engine has restarted.
	id := e.start(eng, runlog.Spec{Task: "x",
		Agent: `cmd:while [ ! -e go ]; do sleep 0.05; done; echo "finished after the restart"`})
	sb := e.started(id)
	adm, err := gwCall(t, eng, sb, "before")
	if err != nil {
		t.Fatal(err)
	}
	endOK(adm, "one")
	eng.Close()
	if row, _ := e.st.GetRun(context.Background(), "", id); row.Status != "running" {
		t.Fatalf("status after the engine stopped: %s", row.Status)
	}
	eng2 := e.engine()
	// A call that comes before the run's worker is back still finds its
	// run, not a record of the sandbox.
	adm, err = gwCall(t, eng2, sb, "after")
	if err != nil {
		t.Fatal(err)
	}
	endOK(adm, "two")
	if err := eng2.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.sbs.root(sb), "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	row, evs := e.finish(eng2, id)
	f := finishedOf(t, evs)
	if row.Status != "succeeded" || f.Text != "finished after the restart" || f.Steps != 2 {
		t.Fatalf("after the restart: %s %+v; events %v", row.Status, f, types(evs))
	}
	if n := len(eventsOf(evs, runlog.EventAgentStarting)); n != 1 {
		t.Errorf("the program was started %d times", n)
	}
	if runs, _ := e.st.ListRuns(context.Background(), store.RunFilter{}); len(runs) != 1 {
		t.Errorf("%d runs; a record of the sandbox was made", len(runs))
	}
}

func TestAgentRunLostSandboxFails(t *testing.T) {
	e := newAgentEnv(t)
	eng := e.engine()
	id := e.start(eng, runlog.Spec{Task: "x", Agent: "cmd:sleep 600"})
	sb := e.started(id)
	eng.Close()
	e.sbs.kill(sb)
	eng2 := e.engine()
	if err := eng2.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	row, evs := e.finish(eng2, id)
	if f := finishedOf(t, evs); row.Status != "failed" || !strings.Contains(f.Reason, "ended: lost: the test killed it") {
		t.Fatalf("%s %+v", row.Status, f)
	}
}

func TestSandboxRecordRun(t *testing.T) {
	e := newAgentEnv(t)
	eng := e.engine()
	sb, err := e.sbs.Create(context.Background(), "", "mine", "busybox")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			adm, err := gwCall(t, eng, sb, fmt.Sprint("call ", i))
			if err != nil {
				t.Error(err)
				return
			}
			if adm.Target != (gateway.Target{Model: "script:sandbox-model", Script: `{"turns":[]}`, Tenant: "acme"}) {
				t.Errorf("target %+v: the sandbox's gateway's", adm.Target)
			}
			endOK(adm, "ok")
		}()
	}
	wg.Wait()
	runs, _ := e.st.ListRuns(context.Background(), store.RunFilter{})
	if len(runs) != 1 || runs[0].Tenant != "acme" {
		t.Fatalf("runs %+v: one record of the sandbox, its tenant's", runs)
	}
	id := runs[0].ID
	if _, err := eng.Start(context.Background(), "", runlog.Spec{Task: "x", Agent: runlog.AgentSandbox}); err == nil {
		t.Error("a user started a sandbox record")
	}
	// A sandbox that cannot say whose it is (gone, no gateway) gets a
	// refusal, not an error a program would retry.
	var ref *gateway.Refusal
	if _, err := gwCall(t, eng, "sb-unknown", "x"); !errors.As(err, &ref) || ref.Status != http.StatusForbidden ||
		!strings.Contains(ref.Message, "cannot be recorded") {
		t.Errorf("a call from an unknown sandbox: %v", err)
	}
	eng.SandboxGone(context.Background(), sb, "it was removed")
	row, evs := e.finish(eng, id)
	f := finishedOf(t, evs)
	if row.Status != "succeeded" || f.Steps != 4 || f.Reason != "the sandbox ended: it was removed" {
		t.Errorf("record: %s %+v; events %v", row.Status, f, types(evs))
	}
}

func TestAgentRunTimeoutStopsASilentProgram(t *testing.T) {
	e := newAgentEnv(t)
	eng := e.engine()
	marker := fmt.Sprint(600000 + rand.IntN(100000))
	id := e.start(eng, runlog.Spec{Task: "x", Agent: "cmd:sleep " + marker,
		Timeout: runlog.Duration(time.Second)})
	row, evs := e.finish(eng, id)
	if f := finishedOf(t, evs); row.Status != "failed" || !strings.HasPrefix(f.Reason, "timeout: the run took longer than 1s") {
		t.Fatalf("%s %+v", row.Status, f)
	}
	if p := procsWith("sleep\x00" + marker); len(p) > 0 {
		t.Errorf("the program runs on after its timeout: %v", p)
	}
}

// A run that ended at a budget while its program had its grace, when the
// service stops: nothing follows the program after a restart (the run is
// over), so it is stopped and the run's sandboxes released now.
func TestAgentRunEndedInGraceIsStoppedAtShutdown(t *testing.T) {
	e := newAgentEnv(t)
	eng := e.engineWithGrace(time.Minute)
	marker := fmt.Sprint(700000 + rand.IntN(100000))
	id := e.start(eng, runlog.Spec{Task: "x", Agent: "cmd:sleep " + marker, MaxSteps: 1})
	sb := e.started(id)
	t.Cleanup(func() { killProcsWith("sleep\x00" + marker) })
	adm, err := gwCall(t, eng, sb, "one")
	if err != nil {
		t.Fatal(err)
	}
	endOK(adm, "one")
	var ref *gateway.Refusal
	if _, err := gwCall(t, eng, sb, "two"); !errors.As(err, &ref) {
		t.Fatalf("the call past the budget: %v", err)
	}
	if p := procsWith("sleep\x00" + marker); len(p) == 0 {
		t.Fatal("the program stopped before its grace was over")
	}
	eng.Close()
	if p := procsWith("sleep\x00" + marker); len(p) > 0 {
		t.Errorf("the ended run's program runs on after the service stopped: %v", p)
	}
	e.gws.mu.Lock()
	released := e.gws.released[id]
	e.gws.mu.Unlock()
	if released == 0 {
		t.Error("the ended run's sandboxes were not released at shutdown")
	}
	if row, _ := e.st.GetRun(context.Background(), "", id); row.Status != "failed" {
		t.Errorf("status %s, want failed (max steps)", row.Status)
	}
}

// A program's output is the sandbox's to choose: what the run keeps of
// it is bounded however much it prints, with or without newlines.
func TestAgentRunHostileOutputIsBounded(t *testing.T) {
	e := newAgentEnv(t)
	eng := e.engine()
	id := e.start(eng, runlog.Spec{Task: "x",
		Agent: `cmd:head -c 3000000 /dev/zero | tr '\0' x; head -c 3000000 /dev/zero | tr '\0' y >&2; exit 1`})
	row, evs := e.finish(eng, id)
	f := finishedOf(t, evs)
	if row.Status != "failed" || !strings.HasPrefix(f.Reason, "exit code 1: …yyy") || len(f.Reason) > 1100 {
		t.Fatalf("%s: reason of %d bytes: %.80q", row.Status, len(f.Reason), f.Reason)
	}
	id, _ = eng.Start(context.Background(), "", runlog.Spec{Task: "x", Agent: `cmd:head -c 3000000 /dev/zero | tr '\0' x`})
	row, evs = e.finish(eng, id)
	if f := finishedOf(t, evs); row.Status != "succeeded" || len(f.Text) != 16<<10 {
		t.Fatalf("%s: final text of %d bytes", row.Status, len(f.Text))
	}
}

// What a program sends in a call is the sandbox's to choose too: the
// record of it is bounded.
func TestGatewayRecordIsBounded(t *testing.T) {
	e := newAgentEnv(t)
	eng := e.engine()
	id := e.start(eng, runlog.Spec{Task: "x", Agent: "cmd:sleep 600"})
	sb := e.started(id)
	var blocks []model.Block
	for range 100 {
		blocks = append(blocks, model.Block{Type: model.BlockToolResult, ToolCallID: "t", Text: strings.Repeat("z", 1<<20),
			Content: []model.Block{{Type: model.BlockImage, MediaType: "image/png", Data: strings.Repeat("A", 1<<20)}}})
	}
	huge, _ := json.Marshal(map[string]string{"command": strings.Repeat("q", 1<<20)})
	adm, err := eng.Begin(context.Background(), gateway.Call{Sandbox: sb, Wire: gateway.WireAnthropic, Model: "m",
		Request: &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: blocks}}}})
	if err != nil {
		t.Fatal(err)
	}
	adm.Entry.End(context.Background(), gateway.Result{Status: 200, Response: &model.Response{Content: []model.Block{
		{Type: model.BlockText, Text: strings.Repeat("w", 1<<20)},
		{Type: model.BlockToolUse, ToolCallID: "c", ToolName: "Bash", Input: huge}}}})
	// End is called exactly once; a second is ignored.
	adm.Entry.End(context.Background(), gateway.Result{Status: 200})
	eng.Cancel(context.Background(), "", id)
	_, evs := e.finish(eng, id)
	mrs := eventsOf(evs, runlog.EventModelResponse)
	if len(mrs) != 1 {
		t.Fatalf("%d records of one call", len(mrs))
	}
	if len(mrs[0].Data) > 2<<20 {
		t.Errorf("the record of one call is %d bytes", len(mrs[0].Data))
	}
	var mr runlog.ModelResponse
	json.Unmarshal(mrs[0].Data, &mr)
	g := mr.Gateway
	if len(g.New) != 65 || !strings.Contains(g.New[64].Text, "36 more blocks not recorded") || g.New[0].Content[0].Data != "" ||
		!strings.HasSuffix(g.New[0].Text, "more bytes not recorded]") {
		t.Errorf("the request's blocks: %d kept, the last %q", len(g.New), g.New[len(g.New)-1].Text)
	}
	if len(mr.Content[0].Text) > 17<<10 || string(mr.Content[1].Input) != `{"reins_not_recorded_bytes":1048590}` {
		t.Errorf("the response: text of %d bytes, input %s", len(mr.Content[0].Text), mr.Content[1].Input)
	}
}

// fakeProgram writes an executable shell script called name in dir.
func fakeProgram(t *testing.T, dir, name, script string) {
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// readLines reads a file the fake program wrote in its sandbox.
func readLines(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// TestAgentRunClaudeCodeSettings runs a stand-in for Claude Code (a script
// called claude on the program's PATH): it gets the arguments and
// environment Claude Code needs, and its stream-json result message is
// the run's answer; a hostile line of more than 1 MiB before it is
// skipped. (Output is followed from the executor's bounded buffer, which
// keeps the last 1 MiB: Claude Code prints its result last.)
func TestAgentRunClaudeCodeSettings(t *testing.T) {
	e := newAgentEnv(t)
	e.gws.path = t.TempDir()
	fakeProgram(t, e.gws.path, "claude", `printf '%s\n' "$@" > args
env | grep -E '^(IS_SANDBOX|CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC|DISABLE_AUTOUPDATER|TMPDIR|ANTHROPIC_BASE_URL)=' | sort > env
echo '{"type":"system","subtype":"init"}'
printf '{"type":"result","result":"'; head -c 2000000 /dev/zero | tr '\0' a; echo '"}'
printf '%s\n' '{"type":"result","subtype":"success","is_error":false,"result":"the answer\nin two lines"}'
echo '{"type":"assistant"}'
`)
	eng := e.engine()
	id := e.start(eng, runlog.Spec{Task: "-v is a task", Agent: "claude-code", Model: "anthropic:claude-haiku-4-5"})
	row, evs := e.finish(eng, id)
	f := finishedOf(t, evs)
	if row.Status != "succeeded" || f.Text != "the answer\nin two lines" {
		t.Fatalf("%s %+v", row.Status, f)
	}
	var spec runlog.Spec
	json.Unmarshal(row.Spec, &spec)
	if spec.Sandboxes["default"] != "agents" || spec.Memory != 2<<30 || spec.MaxSteps != 500 {
		t.Errorf("an agent run's defaults: %+v", spec)
	}
	root := e.sbs.root("sb1")
	want := []string{"-p", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions", "--model", "claude-haiku-4-5", "--", "-v is a task"}
	if got := readLines(t, filepath.Join(root, "args")); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("claude's arguments:\n%q\nwant\n%q", got, want)
	}
	wantEnv := []string{"ANTHROPIC_BASE_URL=http://127.0.0.1:47070", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1",
		"IS_SANDBOX=1", "TMPDIR=/var/tmp"}
	if got := readLines(t, filepath.Join(root, "env")); strings.Join(got, "|") != strings.Join(wantEnv, "|") {
		t.Errorf("claude's environment:\n%q\nwant\n%q", got, wantEnv)
	}
	// Its calls all go to the run's model; the log names no token.
	for _, ev := range evs {
		if bytes.Contains(ev.Data, []byte(gateway.TokenPrefix)) {
			t.Errorf("event %s holds the gateway's token: %s", ev.Type, ev.Data)
		}
	}
	st := eventsOf(evs, runlog.EventAgentStarted)
	var p runlog.AgentProgram
	json.Unmarshal(st[0].Data, &p)
	if p.Pid == 0 || p.Key != id+"/agent" || !strings.Contains(strings.Join(p.Env, ","), "ANTHROPIC_API_KEY") {
		t.Errorf("agent_started %+v", p)
	}
}

// TestAgentRunCodexSettings runs a stand-in for Codex: its arguments name
// the gateway as a model provider of its own, and the last message it
// prints on stdout is the run's answer.
func TestAgentRunCodexSettings(t *testing.T) {
	e := newAgentEnv(t)
	e.gws.path = t.TempDir()
	fakeProgram(t, e.gws.path, "codex", `printf '%s\n' "$@" > args
echo "thinking…" >&2
echo "final message"
`)
	eng := e.engine()
	id := e.start(eng, runlog.Spec{Task: "fix it", Agent: "codex", Model: "openai:gpt-4.1"})
	row, evs := e.finish(eng, id)
	if f := finishedOf(t, evs); row.Status != "succeeded" || f.Text != "final message" {
		t.Fatalf("%s %+v", row.Status, f)
	}
	want := []string{"exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "--color", "never",
		"-c", "model_provider=reins",
		"-c", `model_providers.reins={name="reins",base_url="http://127.0.0.1:47070/v1",env_key="OPENAI_API_KEY",wire_api="responses"}`,
		"-m", "gpt-4.1", "--", "fix it"}
	if got := readLines(t, filepath.Join(e.sbs.root("sb1"), "args")); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("codex's arguments:\n%q\nwant\n%q", got, want)
	}
}

// A paused run's program runs on through a restart: the new engine
// follows it (and holds its calls), so its exit ends the run even before
// a resume.
func TestAgentRunPausedSurvivesARestart(t *testing.T) {
	e := newAgentEnv(t)
	eng := e.engine()
	id := e.start(eng, runlog.Spec{Task: "x", Agent: `cmd:while [ ! -e go ]; do sleep 0.05; done; echo done`})
	sb := e.started(id)
	if err := eng.Pause(context.Background(), "", id); err != nil {
		t.Fatal(err)
	}
	eng.Close()
	eng2 := e.engine()
	if err := eng2.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := gwCall(t, eng2, sb, "held")
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a paused run's call went through after a restart: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	os.WriteFile(filepath.Join(e.sbs.root(sb), "go"), nil, 0o644)
	row, evs := e.finish(eng2, id)
	if f := finishedOf(t, evs); row.Status != "succeeded" || f.Text != "done" {
		t.Fatalf("%s %+v", row.Status, f)
	}
	// The held call is refused once the run has ended.
	var ref *gateway.Refusal
	if err := <-got; !errors.As(err, &ref) {
		t.Fatalf("the held call after the end: %v", err)
	}
}
