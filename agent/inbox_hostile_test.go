package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/reinsdev/reins/agent"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/store"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/reinsdev/reins/gateway"
	"github.com/reinsdev/reins/runlog"
)

// A program that makes calls at once (Claude Code's subagents do) and
// reaches its max steps with calls in flight: the call past the limit is
// answered 429 (retry) while the others run, rather than ending the run
// under them, which would leave them, their answers and their cost out of
// the record. The retry, once they are recorded, ends the run.
func TestAgentRunBudgetWaitsForCallsInFlight(t *testing.T) {
	e := newAgentEnv(t)
	eng := e.engine()
	id := e.start(eng, runlog.Spec{Task: "parallel calls", Agent: "cmd:sleep 600", MaxSteps: 3})
	sb := e.started(id)
	var open []gateway.Admission
	for i := range 3 {
		adm, err := gwCall(t, eng, sb, fmt.Sprintf("in flight %d", i))
		if err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		open = append(open, adm)
	}
	var ref *gateway.Refusal
	_, err := gwCall(t, eng, sb, "one too many")
	if !errors.As(err, &ref) || ref.Status != http.StatusTooManyRequests || ref.Type != "rate_limit_error" {
		t.Fatalf("a 4th call with 3 in flight: %v (%#v)", err, ref)
	}
	for i, adm := range open {
		endOK(adm, fmt.Sprintf("answer %d", i))
	}
	// The last of them ended the run, with no retry needed (a program
	// that makes none is still stopped); a retry is refused for good.
	_, evs := e.finish(eng, id)
	f := finishedOf(t, evs)
	if n := len(eventsOf(evs, runlog.EventModelResponse)); n != 3 || f.Steps != 3 || f.Cost == 0 || !strings.Contains(f.Reason, "max steps reached") {
		t.Errorf("%d calls recorded, finished %+v: %v", n, f, types(evs))
	}
	_, err = gwCall(t, eng, sb, "the retry")
	if !errors.As(err, &ref) || ref.Status != http.StatusForbidden || !strings.Contains(ref.Message, "max steps reached") {
		t.Fatalf("the retry: %v (%#v)", err, ref)
	}
}

// A sandbox's record run has no program to kill: cancelling it ends its
// calls in flight through the gateway (gateway.Ender), as it refuses the
// next.
func TestRecordRunCancelEndsCallsInFlight(t *testing.T) {
	e := newAgentEnv(t)
	eng := e.engine()
	sb, err := e.sbs.Create(context.Background(), "", "mine", "busybox")
	if err != nil {
		t.Fatal(err)
	}
	adm, err := gwCall(t, eng, sb, "streaming")
	if err != nil {
		t.Fatal(err)
	}
	en, ok := adm.Entry.(gateway.Ender)
	if !ok {
		t.Fatalf("a call's entry is %T, not a gateway.Ender", adm.Entry)
	}
	select {
	case <-en.Ended():
		t.Fatal("ended before the run did")
	default:
	}
	runs, err := e.st.ListRuns(context.Background(), store.RunFilter{})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs %v %v", runs, err)
	}
	if err := eng.Cancel(context.Background(), "", runs[0].ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-en.Ended():
	case <-time.After(10 * time.Second):
		t.Fatal("cancelling the record did not end its call in flight")
	}
	adm.Entry.End(context.Background(), gateway.Result{Status: 499, Error: "cut"})
}

// noOwnGateway is gwSandboxes whose sandboxes have no gateway of their
// own, as a sandbox made without --model-gateway whose gateway an agent
// run turned on (the manager's GatewayOf refuses it).
type noOwnGateway struct{ *gwSandboxes }

func (noOwnGateway) GatewayOf(ctx context.Context, id string) (string, string, string, error) {
	return "", "", "", fmt.Errorf("sandbox %s has no model gateway: %w", id, errdefs.ErrFailedPrecondition)
}

// What an agent run's program leaves running in a sandbox it was started
// in (--in) may call once the run is over: with no gateway of the
// sandbox's own to record it, the call is refused in the wire's words,
// not sent with the service's key unbudgeted.
func TestNoOwnGatewayNoCallsWithoutARun(t *testing.T) {
	e := newAgentEnv(t)
	eng, err := agent.New(agent.Config{Store: e.st, Blobs: e.blobs, Sandboxes: noOwnGateway{e.gws}, Models: e.engineModels()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	sb, err := e.sbs.Create(context.Background(), "", "mine", "busybox")
	if err != nil {
		t.Fatal(err)
	}
	_, err = gwCall(t, eng, sb, "left behind")
	var ref *gateway.Refusal
	if !errors.As(err, &ref) || ref.Status != http.StatusForbidden || !strings.Contains(ref.Message, "no model gateway of its own") {
		t.Fatalf("a call with no run: %v (%#v)", err, ref)
	}
	if runs, _ := e.st.ListRuns(context.Background(), store.RunFilter{}); len(runs) != 0 {
		t.Errorf("a record was made: %v", runs)
	}
}

// The record of a call's request is bounded whatever the shape of its
// blocks: a long tool name or call id, and blocks nested in blocks (a
// tool result's content holding tool results, 64 of 64), each block
// within the per-block bounds, do not make a record of many MiB.
func TestGatewayRecordBoundedNested(t *testing.T) {
	e := newAgentEnv(t)
	eng := e.engine()
	id := e.start(eng, runlog.Spec{Task: "x", Agent: "cmd:sleep 600"})
	sb := e.started(id)
	inner := make([]model.Block, 64)
	for i := range inner {
		inner[i] = model.Block{Type: model.BlockToolResult, ToolCallID: "t", Text: strings.Repeat("n", 4<<10)}
	}
	blocks := []model.Block{{Type: model.BlockToolUse, ToolCallID: strings.Repeat("i", 4<<20), ToolName: strings.Repeat("b", 4<<20), Input: json.RawMessage(`{}`)}}
	for range 63 {
		blocks = append(blocks, model.Block{Type: model.BlockToolResult, ToolCallID: "t", Content: inner})
	}
	adm, err := eng.Begin(context.Background(), gateway.Call{Sandbox: sb, Wire: gateway.WireAnthropic, Model: "m",
		Request: &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: blocks}}}})
	if err != nil {
		t.Fatal(err)
	}
	adm.Entry.End(context.Background(), gateway.Result{Status: 200, Response: &model.Response{}})
	eng.Cancel(context.Background(), "", id)
	_, evs := e.finish(eng, id)
	mrs := eventsOf(evs, runlog.EventModelResponse)
	if len(mrs) != 1 {
		t.Fatalf("%d records of one call", len(mrs))
	}
	if n := len(mrs[0].Data); n > 3<<20 {
		t.Errorf("the record of one call is %d MiB", n>>20)
	}
}
