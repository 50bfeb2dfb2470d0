package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/reinsdev/reins/agent"
	"github.com/reinsdev/reins/gateway"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/sandbox/manager"
	"github.com/reinsdev/reins/store"
)

// ledgerSandboxes gives the manager's run sandboxes a model gateway's
// environment by hand (the gateway's own listener is not in this
// benchmark: the ledger is).
type ledgerSandboxes struct{ manager.Runs }

func (ledgerSandboxes) EnableGateway(ctx context.Context, id string) ([]string, error) {
	return gateway.Env(gateway.TokenPrefix + "bench"), nil
}

func (ledgerSandboxes) GatewayOf(ctx context.Context, id string) (string, string, string, error) {
	return "", "", "", nil
}

// ledger: what the engine adds to each model call an agent program makes
// through the gateway (Begin: the run's budgets, pause and cancel; End:
// the record), for a cmd: program in a gVisor sandbox, beside the one
// append of the same record to the log that any recorded call costs.
func (b *bench) ledger(calls int) error {
	st, blobs, err := b.stores("ledger")
	if err != nil {
		return err
	}
	defer st.Close()
	eng, err := agent.New(agent.Config{
		Store: st, Blobs: blobs, Sandboxes: ledgerSandboxes{manager.Runs{M: b.m}},
		Models: func(spec agent.ModelSpec) (model.Model, string, error) { return nil, "", fmt.Errorf("no model") },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	defer eng.Close()
	t0 := time.Now()
	id, err := eng.Start(b.ctx, "", runlog.Spec{Task: "bench", Agent: "cmd:sleep 600", MaxSteps: calls + 10,
		Sandboxes: map[string]string{runlog.DefaultSandbox: "busybox"}})
	if err != nil {
		return err
	}
	defer eng.Cancel(context.Background(), "", id)
	var sb string
	for sb == "" {
		if time.Since(t0) > time.Minute {
			return fmt.Errorf("the program of run %s did not start", id)
		}
		evs, err := st.Events(b.ctx, id, 0, 100)
		if err != nil {
			return err
		}
		for _, ev := range evs {
			switch ev.Type {
			case runlog.EventAgentStarted:
				var p runlog.AgentProgram
				json.Unmarshal(ev.Data, &p)
				sb = p.Sandbox
			case runlog.EventFinished:
				return fmt.Errorf("run %s finished: %s", id, ev.Data)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	started := time.Since(t0)
	req := &model.Request{System: strings.Repeat("s", 2000), Messages: []model.Message{
		{Role: model.RoleUser, Content: []model.Block{{Type: model.BlockText, Text: "task"}}},
		{Role: model.RoleAssistant, Content: []model.Block{{Type: model.BlockToolUse, ToolCallID: "t", ToolName: "Bash", Input: json.RawMessage(`{"command":"ls"}`)}}},
		{Role: model.RoleUser, Content: []model.Block{{Type: model.BlockToolResult, ToolCallID: "t", Text: strings.Repeat("o", 2000)}}},
	}}
	resp := &model.Response{Content: []model.Block{{Type: model.BlockText, Text: strings.Repeat("r", 500)}},
		StopReason: model.StopEndTurn, Usage: model.Usage{InputTokens: 1000, OutputTokens: 100}}
	call := gateway.Call{Sandbox: sb, Wire: gateway.WireAnthropic, Model: "claude-sonnet-4-5", Stream: true, Request: req}
	one := func() (time.Duration, error) {
		t := time.Now()
		adm, err := eng.Begin(b.ctx, call)
		if err != nil {
			return 0, err
		}
		adm.Entry.End(b.ctx, gateway.Result{Status: 200, Response: resp, Upstream: "anthropic:claude-sonnet-4-5"})
		return time.Since(t), nil
	}
	if _, err := one(); err != nil {
		return err
	}
	// The baseline: appending the same record, as written, to a log of
	// its own; interleaved call by call, so that a shared machine's load
	// falls on both alike.
	evs, err := st.Events(b.ctx, id, 0, 0)
	if err != nil {
		return err
	}
	rec := evs[len(evs)-1]
	if rec.Type != runlog.EventModelResponse {
		return fmt.Errorf("the run's last event is %s", rec.Type)
	}
	now := time.Now()
	if err := st.CreateRun(b.ctx, store.Run{ID: "run_baseline", Status: "running", Spec: json.RawMessage(`{}`), CreatedAt: now, UpdatedAt: now},
		store.Event{Type: runlog.EventRunCreated, Time: now, Data: json.RawMessage(`{}`)}); err != nil {
		return err
	}
	var ours, base time.Duration
	last := int64(1)
	for range calls {
		d, err := one()
		if err != nil {
			return err
		}
		ours += d
		t := time.Now()
		if last, err = st.Append(b.ctx, "run_baseline", last, []store.Event{{Type: rec.Type, Time: time.Now(), Data: rec.Data}},
			store.RunUpdate{Summary: json.RawMessage(`{}`)}); err != nil {
			return err
		}
		base += time.Since(t)
	}
	ours /= time.Duration(calls)
	base /= time.Duration(calls)
	b.add(fmt.Sprintf("ledger per model call of an agent program (Begin+End, %d calls)", calls), µs(ours),
		µs(base)+" one append of its record", ratio(ours, base), "≤ 1.5× (the append is the cost)")
	fmt.Fprintf(os.Stderr, "  (the run's program was running %s after Start: sandbox, gateway, start)\n", ms(started))
	return nil
}
