package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/store"
)

// Fork makes a new run whose history is run id's up to event atSeq, with
// model (if not "", and its inline script) instead of the original's. It
// starts with fresh sandboxes; the model is told what was and was not
// restored.
func (e *Engine) Fork(ctx context.Context, tenant, id string, atSeq int64, model, script string) (string, error) {
	if err := CheckModelName(model); err != nil {
		return "", err
	}
	row, err := e.cfg.Store.GetRun(ctx, tenant, id)
	if err != nil {
		return "", err
	}
	if atSeq < 1 || atSeq > row.LastSeq {
		return "", fmt.Errorf("run %s has %d events: fork at a SEQ from 1 to %d (see reins runs events %s): %w",
			id, row.LastSeq, row.LastSeq, id, errdefs.ErrInvalidArgument)
	}
	// The whole log: a checkpoint of the files at atSeq is logged after it.
	all, err := e.cfg.Store.Events(ctx, id, 0, 0)
	if err != nil {
		return "", err
	}
	var evs []store.Event
	for _, ev := range all {
		if ev.Seq <= atSeq {
			evs = append(evs, ev)
		}
	}
	var spec runlog.Spec
	if err := json.Unmarshal(row.Spec, &spec); err != nil {
		return "", err
	}
	if err := notAgent(id, spec, "forked"); err != nil {
		return "", err
	}
	if model != "" {
		spec.Model, spec.Script = model, script
		if err := spec.Normalize(); err != nil {
			return "", err
		}
		if _, _, err := e.openModel(ctx, row.Tenant, spec); err != nil {
			return "", err
		}
	}
	// A fork's own sandboxes: attached ones belong to the original.
	for name, img := range spec.Sandboxes {
		if strings.HasPrefix(img, AttachPrefix) {
			spec.Sandboxes[name] = runlog.DefaultImage
		}
	}
	newID := newRunID()
	specJSON, _ := json.Marshal(spec)
	now := time.Now()
	sum, _ := json.Marshal(runlog.Summary{Model: spec.Model, Task: spec.Task, Started: now})
	var copied []store.Event
	for _, ev := range evs {
		switch ev.Type {
		case runlog.EventRunCreated:
			data, _ := json.Marshal(runlog.RunCreated{Spec: spec})
			ev.Data = data
		case runlog.EventFinished, runlog.EventPaused, runlog.EventResumed:
			continue // the fork's own life decides these
		}
		copied = append(copied, store.Event{Type: ev.Type, Time: ev.Time, Data: ev.Data})
	}
	snaps := forkSnapshots(all, atSeq)
	note := runlog.Forked{From: id, AtSeq: atSeq, Model: model, Snapshots: snaps, Message: forkMessage(id, atSeq, spec, snaps)}
	data, _ := json.Marshal(note)
	copied = append(copied, store.Event{Type: runlog.EventForked, Time: now, Data: data})
	// The fork and its copied history in one write: a crash leaves no run
	// without a log.
	if err := e.cfg.Store.CreateRun(ctx, store.Run{ID: newID, Tenant: row.Tenant, Status: string(runlog.StatusRunning),
		Spec: specJSON, Summary: sum, CreatedAt: now, UpdatedAt: now}, copied...); err != nil {
		return "", err
	}
	e.launch(newID, nil)
	return newID, nil
}

// forkMessage tells a fork's model what its sandboxes hold.
func forkMessage(from string, atSeq int64, spec runlog.Spec, snaps map[string]string) string {
	msg := fmt.Sprintf("This run continues run %s from event %d. Its sandboxes are new, and no process of the original run is running in them. ", from, atSeq)
	if len(snaps) == 0 {
		return msg + "Their files are their images': files the original run made are not there; recreate what you need."
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(spec.Sandboxes)) {
		if _, ok := snaps[name]; ok {
			parts = append(parts, fmt.Sprintf("sandbox %q has its files as they were at that point (from a checkpoint)", name))
		} else {
			parts = append(parts, fmt.Sprintf("sandbox %q starts from its image (no checkpoint was taken by then): recreate what you need", name))
		}
	}
	return msg + strings.Join(parts, "; ") + "."
}

// replayModel plays a run's recorded model responses, in order: the model of
// a verification run.
type replayModel struct {
	responses []runlog.ModelResponse
}

const replayPrefix = "replay:"

// openReplay opens the recorded responses of run id, which must be
// tenant's: only Verify names this model, for a run of the same tenant.
func (e *Engine) openReplay(ctx context.Context, tenant, id string) (*replayModel, error) {
	if _, err := e.cfg.Store.GetRun(ctx, tenant, id); err != nil {
		return nil, err
	}
	evs, err := e.cfg.Store.Events(ctx, id, 0, 0)
	if err != nil {
		return nil, err
	}
	m := &replayModel{}
	for _, ev := range evs {
		if ev.Type == runlog.EventModelResponse {
			var d runlog.ModelResponse
			json.Unmarshal(ev.Data, &d)
			m.responses = append(m.responses, d)
		}
	}
	return m, nil
}

func (m *replayModel) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	step := 0
	for _, msg := range req.Messages {
		if msg.Role == model.RoleAssistant {
			step++
		}
	}
	if step >= len(m.responses) {
		return nil, fmt.Errorf("replay: the recorded run has %d model responses; step %d has none: %w", len(m.responses), step+1, errdefs.ErrFailedPrecondition)
	}
	r := m.responses[step]
	return &model.Response{Content: r.Content, StopReason: r.StopReason, Usage: r.Usage}, nil
}

// Verify starts a run that re-executes run id's recorded model responses
// against fresh sandboxes (no model is called). Compare then reports the
// first divergence in tool results.
func (e *Engine) Verify(ctx context.Context, tenant, id string) (string, error) {
	row, err := e.cfg.Store.GetRun(ctx, tenant, id)
	if err != nil {
		return "", err
	}
	var spec runlog.Spec
	json.Unmarshal(row.Spec, &spec)
	if err := notAgent(id, spec, "re-executed"); err != nil {
		return "", err
	}
	spec.Model, spec.Script = replayPrefix+id, ""
	spec.MaxCost, spec.MaxTokens = 0, 0
	for name, img := range spec.Sandboxes {
		if strings.HasPrefix(img, AttachPrefix) {
			spec.Sandboxes[name] = runlog.DefaultImage
		}
	}
	return e.start(ctx, row.Tenant, spec)
}

// Divergence is the first place a verification run's tool results differ
// from the recorded run's.
type Divergence struct {
	Index    int    `json:"index"` // the n-th tool result (from 1)
	Step     int    `json:"step"`
	Tool     string `json:"tool"`
	Recorded string `json:"recorded"`
	Replayed string `json:"replayed"`
}

// Compare returns the first tool result that differs between runs a and b,
// or nil when they match.
func (e *Engine) Compare(ctx context.Context, tenant, a, b string) (*Divergence, error) {
	results := func(id string) ([]runlog.ToolResult, error) {
		if _, err := e.cfg.Store.GetRun(ctx, tenant, id); err != nil {
			return nil, err
		}
		evs, err := e.cfg.Store.Events(ctx, id, 0, 0)
		if err != nil {
			return nil, err
		}
		var out []runlog.ToolResult
		for _, ev := range evs {
			if ev.Type == runlog.EventToolResult {
				var r runlog.ToolResult
				json.Unmarshal(ev.Data, &r)
				out = append(out, r)
			}
		}
		return out, nil
	}
	ra, err := results(a)
	if err != nil {
		return nil, err
	}
	rb, err := results(b)
	if err != nil {
		return nil, err
	}
	for i := 0; i < max(len(ra), len(rb)); i++ {
		var x, y runlog.ToolResult
		if i < len(ra) {
			x = ra[i]
		}
		if i < len(rb) {
			y = rb[i]
		}
		if x.Text != y.Text || x.IsError != y.IsError || x.Name != y.Name {
			name := x.Name
			if name == "" {
				name = y.Name
			}
			return &Divergence{Index: i + 1, Step: max(x.Step, y.Step), Tool: name, Recorded: x.Text, Replayed: y.Text}, nil
		}
	}
	return nil, nil
}

// notAgent refuses to fork or verify an agent program's run: what it did
// between model calls is its program's, not in the log, so its history
// cannot be continued or re-executed.
func notAgent(id string, spec runlog.Spec, what string) error {
	if spec.Agent == "" {
		return nil
	}
	return fmt.Errorf("run %s is an agent program's (%s): its tools ran inside the program, not from the log, so it cannot be %s; "+
		"start a new run, or replay it with reins runs replay %s: %w", id, spec.Agent, what, id, errdefs.ErrFailedPrecondition)
}
