package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinsdev/reins/agent"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/model/script"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/store"
)

var errHostPath = errdefs.WithMessage(errdefs.ErrPermissionDenied, "tenants name no host path")

// namingEngine is an engine whose model opener refuses a tenant's script
// file (as cmd's registry does) and records what it was asked, and whose
// CheckImage refuses a tenant's oci: image.
func (e *env) namingEngine(seen *[]agent.ModelSpec) *agent.Engine {
	var mu sync.Mutex
	eng, err := agent.New(agent.Config{Store: e.st, Blobs: e.blobs, Sandboxes: e.sbs,
		Models: func(ms agent.ModelSpec) (model.Model, string, error) {
			mu.Lock()
			*seen = append(*seen, ms)
			mu.Unlock()
			name := strings.TrimPrefix(ms.Model, "script:")
			if ms.Script != "" {
				m, err := script.FromJSON(name, []byte(ms.Script))
				return m, name, err
			}
			if ms.Tenant != "" {
				return nil, "", errHostPath
			}
			m, err := script.Load(name)
			return m, name, err
		},
		CheckImage: func(tenant, image string) error {
			if tenant != "" && strings.HasPrefix(image, "oci:") {
				return errHostPath
			}
			return nil
		},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(eng.Close)
	return eng
}

func inline(turns ...map[string]any) string {
	data, _ := json.Marshal(map[string]any{"turns": turns})
	return string(data)
}

// oldRun records a run as an older version would have, with spec as it
// was, and lets Recover start it: the checks at step time must hold.
func (e *env) oldRun(tenant string, spec runlog.Spec) string {
	e.t.Helper()
	if err := spec.Normalize(); err != nil {
		e.t.Fatal(err)
	}
	ctx := context.Background()
	id := "run_0123456789abcdef"
	specJSON, _ := json.Marshal(spec)
	now := time.Now()
	if err := e.st.CreateRun(ctx, store.Run{ID: id, Tenant: tenant, Status: string(runlog.StatusQueued),
		Spec: specJSON, Summary: json.RawMessage(`{}`), CreatedAt: now, UpdatedAt: now}); err != nil {
		e.t.Fatal(err)
	}
	ev, _ := json.Marshal(runlog.RunCreated{Spec: spec})
	if _, err := e.st.Append(ctx, id, 0, []store.Event{{Type: runlog.EventRunCreated, Time: now, Data: ev}},
		store.RunUpdate{Status: string(runlog.StatusRunning)}); err != nil {
		e.t.Fatal(err)
	}
	return id
}

// TestTenantModelNamesNoHostPath: the tenant reaches the model opener at
// start and at step time; a tenant's script file is refused before a run
// exists, and a log from an older version naming one fails the run there.
func TestTenantModelNamesNoHostPath(t *testing.T) {
	e := newEnv(t)
	var seen []agent.ModelSpec
	eng := e.namingEngine(&seen)
	ctx := context.Background()

	if _, err := eng.Start(ctx, "acme", runlog.Spec{Task: "x", Model: e.script(turn("hi"))}); !errors.Is(err, errHostPath) {
		t.Errorf("a tenant's script file: %v, want refused", err)
	}
	if runs, _ := e.st.ListRuns(ctx, store.RunFilter{}); len(runs) != 0 {
		t.Errorf("a refused start made %d runs", len(runs))
	}
	id, err := eng.Start(ctx, "acme", runlog.Spec{Task: "x", Model: "script:mine.json", Script: inline(turn("inline"))})
	if err != nil {
		t.Fatal(err)
	}
	row, _ := e.finish(eng, id)
	if row.Status != "succeeded" || summary(t, row).Text != "inline" {
		t.Errorf("a tenant's inline script: %s %+v", row.Status, summary(t, row))
	}
	for _, ms := range seen {
		if ms.Tenant != "acme" {
			t.Errorf("the opener was asked %+v, want tenant acme", ms)
		}
	}

	// A script with a model that is not script: is refused.
	if _, err := eng.Start(ctx, "acme", runlog.Spec{Task: "x", Model: "openai:gpt-4.1", Script: inline(turn("x"))}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a script with an openai model: %v, want invalid", err)
	}

	// An older version's log: the step refuses it too.
	old := e.oldRun("acme", runlog.Spec{Task: "x", Model: e.script(turn("from the host"))})
	if err := eng.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	row, _ = e.finish(eng, old)
	if row.Status != "failed" || !strings.Contains(summary(t, row).Reason, "tenants name no host path") {
		t.Errorf("an old run naming a host script: %s %+v, want failed with the refusal", row.Status, summary(t, row))
	}
}

// TestTenantImageNamesNoHostPath: CheckImage is asked at start and before
// a sandbox is made (for an older version's log); nothing is made.
func TestTenantImageNamesNoHostPath(t *testing.T) {
	e := newEnv(t)
	var seen []agent.ModelSpec
	eng := e.namingEngine(&seen)
	ctx := context.Background()
	model := inline(turn("", call("bash", map[string]any{"command": "true"})), turn("done"))
	_, err := eng.Start(ctx, "acme", runlog.Spec{Task: "x", Model: "script:s", Script: model,
		Sandboxes: map[string]string{"default": "oci:/etc"}})
	if !errors.Is(err, errHostPath) {
		t.Errorf("a tenant's oci: image: %v, want refused", err)
	}
	old := e.oldRun("acme", runlog.Spec{Task: "x", Model: "script:s", Script: model, Sandboxes: map[string]string{"default": "oci:/etc"}})
	if err := eng.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	// The call is answered with the refusal, as any sandbox that cannot
	// be made is, and the run goes on.
	_, evs := e.finish(eng, old)
	refused := false
	for _, ev := range evs {
		var res runlog.ToolResult
		if ev.Type == runlog.EventToolResult && json.Unmarshal(ev.Data, &res) == nil {
			refused = refused || (res.IsError && strings.Contains(res.Text, "tenants name no host path"))
		}
	}
	if !refused {
		t.Errorf("an old run with a host image: no tool result tells the refusal: %v", types(evs))
	}
	if e.sbs.n != 0 {
		t.Errorf("a refused image made %d sandboxes", e.sbs.n)
	}
}

// TestReplayIsInternal: nobody names replay: (the admin neither), with
// one answer whatever run it names; Verify, which uses it, still works,
// and only on the caller's own runs.
func TestReplayIsInternal(t *testing.T) {
	e := newEnv(t)
	var seen []agent.ModelSpec
	eng := e.namingEngine(&seen)
	ctx := context.Background()
	model := inline(turn("", call("bash", map[string]any{"command": "echo recorded"})), turn("done"))
	acmeRun, err := eng.Start(ctx, "acme", runlog.Spec{Task: "x", Model: "script:s", Script: model})
	if err != nil {
		t.Fatal(err)
	}
	if row, _ := e.finish(eng, acmeRun); row.Status != "succeeded" {
		t.Fatalf("acme's run: %s", row.Status)
	}
	var first string
	for _, tenant := range []string{"", "acme", "beta"} {
		for _, id := range []string{acmeRun, "run_00000000deadbeef", "nosuch"} {
			_, err := eng.Start(ctx, tenant, runlog.Spec{Task: "x", Model: "replay:" + id})
			_, ferr := eng.Fork(ctx, tenant, acmeRun, 1, "replay:"+id, "")
			for _, err := range []error{err, ferr} {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Errorf("tenant %q naming replay:%s: %v, want invalid argument", tenant, id, err)
					continue
				}
				if first == "" {
					first = err.Error()
				} else if err.Error() != first {
					t.Errorf("replay:%s answers %q, another %q", id, err, first)
				}
			}
		}
	}
	if strings.Contains(first, acmeRun) || strings.Contains(first, "not found") {
		t.Errorf("the refusal tells about runs: %s", first)
	}
	if runs, _ := e.st.ListRuns(ctx, store.RunFilter{}); len(runs) != 1 {
		t.Errorf("refused replay: starts left %d runs, want acme's alone", len(runs))
	}

	if _, err := eng.Verify(ctx, "beta", acmeRun); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("beta verifying acme's run: %v, want not found", err)
	}
	v, err := eng.Verify(ctx, "acme", acmeRun)
	if err != nil {
		t.Fatal(err)
	}
	if row, _ := e.finish(eng, v); row.Status != "succeeded" {
		t.Errorf("acme verifying its run: %s %+v", row.Status, summary(t, row))
	}
	if d, err := eng.Compare(ctx, "acme", acmeRun, v); err != nil || d != nil {
		t.Errorf("Compare: %+v, %v; want the same", d, err)
	}
}
