package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/policy"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/tool"
)

func (e *Engine) policyFor(ctx context.Context, tenant string, spec runlog.Spec) (*policy.Policy, error) {
	specs := map[string]tool.Spec{askHumanName: askHumanSpec}
	for _, t := range e.tools() {
		specs[t.Spec().Name] = t.Spec()
	}
	run := policy.Default()
	if strings.TrimSpace(spec.Policy) != "" {
		p, err := policy.Parse([]byte(spec.Policy), specs)
		if err != nil {
			return nil, err
		}
		run = p
	}
	if e.cfg.TenantPolicy == nil || tenant == "" {
		return run, nil
	}
	text, err := e.cfg.TenantPolicy(ctx, tenant)
	if err != nil || strings.TrimSpace(text) == "" {
		return run, err
	}
	tp, err := policy.Parse([]byte(text), specs)
	if err != nil {
		return nil, fmt.Errorf("tenant %s's default policy: %w", tenant, err)
	}
	if strings.TrimSpace(spec.Policy) == "" {
		return tp, nil
	}
	return run.WithTenant(tp), nil
}

// gate applies the policy to a call before its intent is logged. It
// returns true when the call may run now (with its possibly edited input);
// otherwise it has logged a denial or parked the run.
func (e *Engine) gate(ctx context.Context, r *run, c model.Block) (json.RawMessage, bool, error) {
	c.Input = withComputerSandbox(r.st.spec, c)
	if d, ok := r.st.approvals[c.ToolCallID]; ok {
		if !d.Approved {
			return nil, false, nil // the denial's result is logged with the decision
		}
		if len(d.Edited) > 0 {
			return d.Edited, true, nil
		}
		return c.Input, true, nil
	}
	// The policy (and so a person asked to approve) sees only calls that
	// can run: call() reports an unknown tool, or arguments that do not fit
	// the tool's schema, to the model without asking anyone.
	t := e.findTool(c.ToolName)
	if t == nil || !allowed(r.st.spec, c.ToolName) || c.InputError != "" ||
		validateInput(t.Spec().InputSchema, c.Input) != nil {
		return c.Input, true, nil
	}
	if r.policy == nil {
		p, err := e.policyFor(ctx, r.tenant, r.st.spec)
		if err != nil {
			return nil, false, err
		}
		r.policy = p
	}
	dec := r.policy.Decide(policy.Call{Tool: t.Spec(), Input: c.Input},
		policy.State{ReadUntrusted: r.st.untrusted, Always: r.st.always})
	pd := runlog.PolicyDecision{CallID: c.ToolCallID, Tool: c.ToolName, Action: string(dec.Action), Rule: dec.Rule, Reason: dec.Reason}
	switch dec.Action {
	case policy.Deny:
		return nil, false, e.append(ctx, r, runlog.StatusRunning, typedEvent{runlog.EventPolicyDecision, pd},
			runlog.ToolResult{Step: r.st.steps, CallID: c.ToolCallID, Name: c.ToolName, IsError: true,
				Text: fmt.Sprintf("denied by policy (rule %s): %s. Do not retry it; find another way or explain why it is needed.", dec.Rule, dec.Reason)})
	case policy.Ask:
		return nil, false, e.append(ctx, r, runlog.StatusWaitingApproval, typedEvent{runlog.EventPolicyDecision, pd},
			typedEvent{runlog.EventApprovalRequested, runlog.ApprovalRequested{CallID: c.ToolCallID, Tool: c.ToolName, Input: c.Input, Rule: dec.Rule, Reason: dec.Reason}})
	}
	if dec.Rule != "" && dec.Rule != "default" {
		if err := e.append(ctx, r, "", typedEvent{runlog.EventPolicyDecision, pd}); err != nil {
			return nil, false, err
		}
	}
	return c.Input, true, nil
}

// Pending is a call waiting for a person.
type Pending = runlog.ApprovalRequested

// PendingApprovals lists the calls run id waits on. Only a parked run
// (waiting or paused) has any; its state is kept, so this reads one row.
func (e *Engine) PendingApprovals(ctx context.Context, tenant, id string) ([]Pending, error) {
	defer e.lockRun(id)()
	row, err := e.cfg.Store.GetRun(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	// An agent run has no approvals, and its worker runs on while it is
	// paused (loadParked would wait for it to stop).
	if !parkedStatus(row.Status) || specOf(row).Agent != "" {
		return nil, nil
	}
	r, err := e.loadParked(ctx, row)
	if err != nil {
		return nil, err
	}
	return r.st.pendingApprovals(), nil
}

// parkedStatus reports whether a run with status has no worker of its own
// (one may be on its way out): it waits for a person or is paused.
func parkedStatus(status string) bool {
	return runlog.Status(status) == runlog.StatusWaitingApproval || runlog.Status(status) == runlog.StatusPaused
}

// pendingApprovals are the calls of the last response a person must decide.
func (s *state) pendingApprovals() []Pending {
	var out []Pending
	for _, c := range s.calls() {
		if p, ok := s.asked[c.ToolCallID]; ok {
			if _, decided := s.approvals[c.ToolCallID]; !decided {
				out = append(out, p)
			}
		}
	}
	return out
}

// Decide approves or denies a pending call. callID "" picks the only (or
// first) pending call. An edit must fit the tool's schema.
func (e *Engine) Decide(ctx context.Context, tenant, id string, d runlog.ApprovalDecided) error {
	defer e.lockRun(id)()
	row, err := e.cfg.Store.GetRun(ctx, tenant, id)
	if err != nil {
		return err
	}
	// Only a parked run has calls pending (a decision sets it running).
	if !parkedStatus(row.Status) {
		return fmt.Errorf("run %s waits for no approval: %w", id, errdefs.ErrFailedPrecondition)
	}
	r, err := e.loadParked(ctx, row)
	if err != nil {
		return err
	}
	pending := r.st.pendingApprovals()
	if len(pending) == 0 {
		return fmt.Errorf("run %s waits for no approval: %w", id, errdefs.ErrFailedPrecondition)
	}
	var p *Pending
	for i := range pending {
		if d.CallID == "" || pending[i].CallID == d.CallID {
			p = &pending[i]
			break
		}
	}
	if p == nil {
		var ids []string
		for _, q := range pending {
			ids = append(ids, q.CallID)
		}
		return fmt.Errorf("run %s has no pending call %q; pending: %s: %w", id, d.CallID, strings.Join(ids, ", "), errdefs.ErrNotFound)
	}
	d.CallID = p.CallID
	if len(d.Edited) > 0 {
		t := e.findTool(p.Tool)
		if t == nil {
			return fmt.Errorf("tool %s is no longer configured: %w", p.Tool, errdefs.ErrFailedPrecondition)
		}
		if err := validateInput(t.Spec().InputSchema, d.Edited); err != nil {
			return fmt.Errorf("the edited arguments do not fit %s's schema: %v (schema: %s): %w", p.Tool, err, compact(t.Spec().InputSchema), errdefs.ErrInvalidArgument)
		}
	}
	events := []any{typedEvent{runlog.EventApprovalDecided, d}}
	if !d.Approved {
		reason := d.Reason
		if reason == "" {
			reason = "no reason given"
		}
		events = append(events, runlog.ToolResult{Step: r.st.steps, CallID: d.CallID, Name: p.Tool, IsError: true,
			Text: fmt.Sprintf("A person denied this call (%s): %s", d.Actor, reason)})
	}
	if err := e.append(ctx, r, runlog.StatusRunning, events...); err != nil {
		return err
	}
	e.launch(id, r)
	return nil
}

// Pause asks a run to stop at its next safe point (after the current model
// or tool call). A run that waits (approval, a question) is paused at once.
func (e *Engine) Pause(ctx context.Context, tenant, id string) error {
	defer e.lockRun(id)()
	row, err := e.cfg.Store.GetRun(ctx, tenant, id)
	if err != nil {
		return err
	}
	switch runlog.Status(row.Status) {
	case runlog.StatusPaused:
		return fmt.Errorf("run %s is already paused: %w", id, errdefs.ErrFailedPrecondition)
	case runlog.StatusSucceeded, runlog.StatusFailed, runlog.StatusCancelled:
		return fmt.Errorf("run %s already ended (%s): %w", id, row.Status, errdefs.ErrFailedPrecondition)
	}
	if specOf(row).Agent != "" {
		return e.pauseAgent(ctx, id)
	}
	e.mu.Lock()
	w := e.workers[id]
	e.mu.Unlock()
	if w == nil || parkedStatus(row.Status) {
		// Parked (a worker still there is on its way out).
		r, err := e.loadParked(ctx, row)
		if err != nil {
			return err
		}
		return e.append(ctx, r, runlog.StatusPaused, typedEvent{runlog.EventPaused, runlog.Note{Message: "paused by a user"}})
	}
	// The worker pauses at its next safe point. (Only it appends to a
	// running run's log; a pause asked for just before a crash is lost,
	// and the run continues after the restart.)
	w.pausing.Store(true)
	return nil
}

// Resume continues a paused run where it stopped.
func (e *Engine) Resume(ctx context.Context, tenant, id string) error {
	defer e.lockRun(id)()
	row, err := e.cfg.Store.GetRun(ctx, tenant, id)
	if err != nil {
		return err
	}
	if runlog.Status(row.Status) != runlog.StatusPaused {
		return fmt.Errorf("run %s is %s, not paused: %w", id, row.Status, errdefs.ErrFailedPrecondition)
	}
	if specOf(row).Agent != "" {
		return e.resumeAgent(ctx, id)
	}
	r, err := e.loadParked(ctx, row)
	if err != nil {
		return err
	}
	status := runlog.StatusRunning
	if r.st.waiting != nil || r.st.awaitingApproval() {
		status = runlog.StatusWaitingApproval
	}
	if err := e.append(ctx, r, status, typedEvent{runlog.EventResumed, runlog.Note{Message: "resumed by a user"}}); err != nil {
		return err
	}
	if status == runlog.StatusRunning {
		e.launch(id, r)
	}
	return nil
}

// CheckPolicy parses a policy document against the engine's tools, as a run
// or a tenant default would use it.
func (e *Engine) CheckPolicy(text string) error {
	_, err := e.policyFor(context.Background(), "", runlog.Spec{Policy: text})
	return err
}
