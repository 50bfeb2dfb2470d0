package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/gateway"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/store"
)

// Runs of agent programs inside the sandbox (Spec.Agent): the program
// (Claude Code, Codex, a user's own) is the loop, and the engine is the
// model gateway's Ledger. Each model call the program makes arrives at
// Begin from the sandbox it runs in; the engine binds the sandbox to the
// agent run working in it (or, with none, to the sandbox's own record run,
// made on its first call), holds the call to the run's budgets, pause and
// cancel, and records it at Entry.End as a model_response with Gateway
// set. The run's worker starts the program and follows it to its exit
// (inbox_program.go). Decision 0029.

var _ gateway.Ledger = (*Engine)(nil)

// agentRun is an agent run's live state. Every append to its log (its
// worker's, Begin's and End's, steering's) is made holding mu, on r.
type agentRun struct {
	mu sync.Mutex
	r  *run
	// inflight counts the calls admitted and not yet ended: with the
	// calls recorded, what MaxSteps counts.
	inflight int
	// atBudget is set when a call was refused at a budget while others
	// were in flight: the last of them to end ends the run.
	atBudget bool
	// resume is closed when a paused run resumes (nil while running).
	resume chan struct{}
	// ended is closed once the run's finished event is in its log.
	ended chan struct{}
}

func newAgentRun(r *run) *agentRun {
	a := &agentRun{r: r, ended: make(chan struct{})}
	if r.st.paused {
		a.resume = make(chan struct{})
	}
	if r.st.finished != nil {
		close(a.ended)
	}
	return a
}

// agentOf is the agent run id's state: the one kept, or folded from its log.
func (e *Engine) agentOf(ctx context.Context, id string) (*agentRun, error) {
	e.mu.Lock()
	a := e.agents[id]
	e.mu.Unlock()
	if a != nil {
		return a, nil
	}
	r, err := e.load(ctx, id)
	if err != nil {
		return nil, err
	}
	if r.st.finished != nil {
		return newAgentRun(r), nil // not kept: nothing changes it again
	}
	return e.keepAgent(r), nil
}

// keepAgent keeps r as its agent run's state unless one is kept already.
func (e *Engine) keepAgent(r *run) *agentRun {
	e.mu.Lock()
	defer e.mu.Unlock()
	if a := e.agents[r.id]; a != nil {
		return a
	}
	a := newAgentRun(r)
	e.agents[r.id] = a
	return a
}

// dropAgent forgets a finished agent run's state (its log has it all).
func (e *Engine) dropAgent(run string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.agents, run)
	for sb, id := range e.records {
		if id == run {
			delete(e.records, sb)
		}
	}
}

// appendAgent appends to a's log; hold a.mu.
func (e *Engine) appendAgent(ctx context.Context, a *agentRun, status runlog.Status, events ...any) error {
	err := e.append(ctx, a.r, status, events...)
	if a.r.st.finished != nil && !a.isEnded() {
		close(a.ended)
	}
	return err
}

// finishAgent ends a's run (once); hold a.mu. Its program, if any, is
// stopped by its worker, which then releases the run's sandbox.
func (e *Engine) finishAgent(ctx context.Context, a *agentRun, status runlog.Status, text, reason string) {
	st := a.r.st
	if st.finished != nil {
		return
	}
	f := runlog.Finished{Status: status, Text: text, Reason: reason, Usage: st.usage, Cost: st.cost, Steps: st.steps}
	if err := e.appendAgent(ctx, a, status, f); err != nil {
		e.log.Error("recording the end of an agent run", "run", a.r.id, "err", err)
		return
	}
	e.log.Info("run finished", "run", a.r.id, "status", status, "reason", reason, "steps", st.steps)
}

// refusal is what a program is answered when its run takes no more calls,
// chosen so that the program stops at once instead of retrying (both
// retry 429 and 5xx; measured, decision 0029): on the Anthropic
// wire a 403 permission_error (Claude Code makes one request and exits
// 1; a 400 it tries six times), on OpenAI's a 400 invalid_request_error
// (Codex makes one; a 403 it retries five times with backoff).
func refusal(wire gateway.Wire, msg string) *gateway.Refusal {
	if wire == gateway.WireAnthropic {
		return &gateway.Refusal{Status: http.StatusForbidden, Type: "permission_error", Message: "reins: " + msg}
	}
	return &gateway.Refusal{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: "reins: " + msg}
}

// Begin admits one model call from a sandbox (gateway.Ledger).
func (e *Engine) Begin(ctx context.Context, call gateway.Call) (gateway.Admission, error) {
	if call.Sandbox == "" {
		return gateway.Admission{}, refusal(call.Wire, "this call came from no sandbox")
	}
	a, err := e.runOfSandbox(ctx, call.Sandbox)
	var noRecord *noRecordError
	if errors.As(err, &noRecord) {
		// Not a passing failure: a 5xx would have the program retry.
		msg := noRecord.Error()
		if errors.Is(err, errdefs.ErrFailedPrecondition) {
			// A sandbox whose gateway an agent run turned on (it has none
			// of its own) has no record to fall back to: what its program
			// left running calls nothing once the run is over.
			msg = fmt.Sprintf("sandbox %s has no model gateway of its own (one made with --model-gateway) and no agent run works in it now; it takes no model calls. Stop here.", call.Sandbox)
		}
		return gateway.Admission{}, refusal(call.Wire, msg)
	}
	if err != nil {
		return gateway.Admission{}, err
	}
	for {
		a.mu.Lock()
		st := a.r.st
		if f := st.finished; f != nil {
			a.mu.Unlock()
			msg := fmt.Sprintf("run %s has ended (%s)", a.r.id, f.Status)
			if f.Reason != "" {
				msg += ": " + f.Reason
			}
			return gateway.Admission{}, refusal(call.Wire, msg+"; it takes no more model calls. Stop here.")
		}
		if st.paused {
			// Held until resume, or the run's end (then refused).
			ch := a.resume
			a.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-a.ended:
				continue
			case <-ctx.Done():
				return gateway.Admission{}, ctx.Err()
			}
		}
		if reason := a.overBudget(); reason != "" && a.inflight > 0 {
			// Ending the run now would leave the calls in flight, their
			// answers and their cost out of its record (End records
			// nothing after the end): this call is retried once they
			// are in, and that retry ends the run.
			a.atBudget = true
			a.mu.Unlock()
			return gateway.Admission{}, &gateway.Refusal{Status: http.StatusTooManyRequests, Type: "rate_limit_error",
				Message: fmt.Sprintf("reins: run %s is at its budget (%s) with %d model calls in flight: retry when they have finished", a.r.id, reason, a.inflight)}
		} else if reason != "" {
			e.finishAgent(context.WithoutCancel(ctx), a, runlog.StatusFailed, "", reason)
			a.mu.Unlock()
			return gateway.Admission{}, refusal(call.Wire, fmt.Sprintf("run %s is over its budget: %s. The run has ended; do not retry.", a.r.id, reason))
		}
		a.inflight++
		target := gateway.Target{Model: st.spec.Model, Script: st.spec.Script, Tenant: a.r.tenant}
		a.mu.Unlock()
		ent := &gatewayEntry{e: e, a: a, call: summarizeCall(call), target: target}
		return gateway.Admission{Target: target, Entry: ent}, nil
	}
}

// overBudget says which budget a's run has used up, if any; hold a.mu. A
// sandbox's own record has none (the sandbox's limits are its own).
func (a *agentRun) overBudget() string {
	st, s := a.r.st, a.r.st.spec
	if s.Agent == runlog.AgentSandbox {
		return ""
	}
	switch {
	case s.MaxSteps > 0 && st.steps+a.inflight >= s.MaxSteps:
		return fmt.Sprintf("max steps reached: the run made %d model calls, its limit (raise --max-steps)", st.steps+a.inflight)
	case s.MaxCost > 0 && st.cost >= s.MaxCost:
		return fmt.Sprintf("max cost reached: the run's model calls cost $%.4f, its limit is $%.4f (raise --max-cost)", st.cost, s.MaxCost)
	case s.MaxTokens > 0 && st.usage.Total() >= s.MaxTokens:
		return fmt.Sprintf("max tokens reached: the run used %d tokens, its limit is %d", st.usage.Total(), s.MaxTokens)
	case s.Timeout > 0 && !st.created.IsZero() && time.Since(st.created) > time.Duration(s.Timeout):
		return timeoutReason(s)
	}
	return ""
}

func timeoutReason(s runlog.Spec) string {
	return fmt.Sprintf("timeout: the run took longer than %s (raise --timeout)", time.Duration(s.Timeout))
}

// Bounds of what the log keeps of one gateway call: per block, and over
// all of a call's blocks, those nested in blocks (a tool result's
// content) too.
const (
	maxRecordBlocks    = 64
	maxRecordBlockText = 16 << 10
	maxRecordInput     = 16 << 10
	maxRecordName      = 256     // a tool's name, a call's id, a media type
	maxRecordAllBlocks = 256     // at every depth
	maxRecordBytes     = 2 << 20 // of text and tool input, at every depth
)

// summarizeCall is what is kept of a call's request until its End: its
// size, and the blocks of its last message when that is the user's (tool
// results, a person's message: what is new since the model last spoke).
func summarizeCall(c gateway.Call) runlog.GatewayCall {
	g := runlog.GatewayCall{Sandbox: c.Sandbox, Wire: string(c.Wire), Asked: c.Model, Stream: c.Stream}
	if req := c.Request; req != nil {
		g.Messages, g.Tools, g.SystemChars = len(req.Messages), len(req.Tools), len(req.System)
		if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == model.RoleUser {
			g.New = boundBlocks(req.Messages[n-1].Content)
		}
	}
	return g
}

// boundBlocks copies blocks for the log, within the bounds above: long
// text is cut (saying how much), long tool input replaced by a note, long
// names cut, image data dropped, blocks past the count left out (saying
// how many).
func boundBlocks(blocks []model.Block) []model.Block {
	b := recordBudget{blocks: maxRecordAllBlocks, bytes: maxRecordBytes}
	return b.bound(blocks)
}

// recordBudget is what is left of the bounds over all of a call's blocks.
type recordBudget struct{ blocks, bytes int }

func (bud *recordBudget) bound(blocks []model.Block) []model.Block {
	if len(blocks) == 0 {
		return nil
	}
	out := make([]model.Block, 0, min(len(blocks), maxRecordBlocks+1))
	for i, b := range blocks {
		if i == maxRecordBlocks || bud.blocks == 0 {
			out = append(out, model.Block{Type: model.BlockText, Text: fmt.Sprintf("[reins: %d more blocks not recorded]", len(blocks)-i)})
			break
		}
		bud.blocks--
		b.ToolName, b.ToolCallID, b.MediaType = cutName(b.ToolName), cutName(b.ToolCallID), cutName(b.MediaType)
		if limit := min(maxRecordBlockText, bud.bytes); len(b.Text) > limit {
			b.Text = b.Text[:limit] + fmt.Sprintf("\n[reins: %d more bytes not recorded]", len(b.Text)-limit)
			bud.bytes -= limit
		} else {
			bud.bytes -= len(b.Text)
		}
		if len(b.Input) > min(maxRecordInput, bud.bytes) {
			note, _ := json.Marshal(map[string]any{"reins_not_recorded_bytes": len(b.Input)})
			b.Input = note
		} else {
			bud.bytes -= len(b.Input)
		}
		if b.Data != "" {
			b.Data = ""
		}
		b.Content = bud.bound(b.Content)
		out = append(out, b)
	}
	return out
}

func cutName(s string) string {
	if len(s) <= maxRecordName {
		return s
	}
	return s[:maxRecordName] + "…"
}

// gatewayEntry records one admitted call (gateway.Entry).
type gatewayEntry struct {
	e      *Engine
	a      *agentRun
	call   runlog.GatewayCall
	target gateway.Target
	once   sync.Once
}

var _ gateway.Ender = (*gatewayEntry)(nil)

// Ended is closed when the call's run ends: the gateway then cuts the
// call (a cancel, a budget or a timeout ends the calls in flight too, the
// program's process aside).
func (g *gatewayEntry) Ended() <-chan struct{} { return g.a.ended }

// End records the call in its run's log: its content, usage, cost and
// latency. A call that ends after its run did is not recorded (the
// finished event stays the log's last).
func (g *gatewayEntry) End(ctx context.Context, res gateway.Result) {
	g.once.Do(func() { g.end(ctx, res) })
}

func (g *gatewayEntry) end(ctx context.Context, res gateway.Result) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	a := g.a
	a.mu.Lock()
	defer a.mu.Unlock()
	a.inflight--
	if a.r.st.finished != nil {
		g.e.log.Info("a model call ended after its run; not recorded", "run", a.r.id, "status", res.Status)
		return
	}
	gc := g.call
	gc.Model, gc.Status, gc.Error, gc.FirstMS = res.Upstream, res.Status, res.Error, res.FirstByte.Milliseconds()
	mr := runlog.ModelResponse{Step: a.r.st.steps + 1, DurationMS: res.Duration.Milliseconds(), Gateway: &gc}
	if r := res.Response; r != nil {
		mr.Content, mr.StopReason, mr.Usage = boundBlocks(r.Content), r.StopReason, r.Usage
		mr.CostUSD = g.e.cfg.Prices.Cost(pricedAs(g.target, gc), r.Usage)
	}
	if mr.Content == nil {
		mr.Content = []model.Block{}
	}
	if err := g.e.appendAgent(ctx, a, "", mr); err != nil {
		g.e.log.Error("recording a model call", "run", a.r.id, "err", err)
	}
	if a.atBudget && a.inflight == 0 {
		if reason := a.overBudget(); reason != "" {
			g.e.finishAgent(ctx, a, runlog.StatusFailed, "", reason)
		}
	}
}

// pricedAs is the model a call is priced as: the one that answered, else
// its target's, else the one asked at the provider of its wire.
func pricedAs(t gateway.Target, c runlog.GatewayCall) string {
	switch {
	case c.Model != "":
		return c.Model
	case t.Model != "":
		return t.Model
	case c.Wire == string(gateway.WireAnthropic):
		return "anthropic:" + c.Asked
	}
	return "openai:" + c.Asked
}

// runOfSandbox is the run a call from sandbox sb is recorded in: the
// agent run working in it, else the sandbox's own record run (made now
// when it has none).
func (e *Engine) runOfSandbox(ctx context.Context, sb string) (*agentRun, error) {
	e.mu.Lock()
	id := e.bound[sb]
	if id == "" {
		id = e.records[sb]
	}
	e.mu.Unlock()
	if id != "" {
		return e.agentOf(ctx, id)
	}
	// One lookup at a time: two first calls make one record.
	e.recordMu.Lock()
	defer e.recordMu.Unlock()
	id, record, err := e.findSandboxRun(ctx, sb)
	if err != nil {
		return nil, err
	}
	if id == "" {
		if id, err = e.createRecord(ctx, sb); err != nil {
			return nil, err
		}
		record = true
	}
	e.mu.Lock()
	if record {
		e.records[sb] = id
	} else if e.bound[sb] == "" {
		e.bound[sb] = id
	}
	e.mu.Unlock()
	return e.agentOf(ctx, id)
}

// findSandboxRun looks in the log for an unfinished run working in sandbox
// sb: an agent run's (a worker that has not yet bound it after a restart)
// or the sandbox's record.
func (e *Engine) findSandboxRun(ctx context.Context, sb string) (id string, record bool, err error) {
	rows, err := e.cfg.Store.ListRuns(ctx, store.RunFilter{Statuses: []string{string(runlog.StatusQueued),
		string(runlog.StatusRunning), string(runlog.StatusPaused)}, Limit: 100000})
	if err != nil {
		return "", false, err
	}
	for _, row := range rows {
		spec := specOf(row)
		if spec.Agent == "" {
			continue
		}
		var sum runlog.Summary
		json.Unmarshal(row.Summary, &sum)
		if sum.Sandbox[runlog.DefaultSandbox] != sb && spec.Sandboxes[runlog.DefaultSandbox] != AttachPrefix+sb {
			continue
		}
		if spec.Agent != runlog.AgentSandbox {
			return row.ID, false, nil
		}
		id = row.ID
	}
	return id, id != "", nil
}

// createRecord makes sandbox sb's own record run: the run its calls are
// recorded in while no agent run works in it. Its tenant, model and
// script are the sandbox's gateway's; it has no budgets and ends when the
// sandbox does (SandboxGone, or the janitor finding it gone).
func (e *Engine) createRecord(ctx context.Context, sb string) (string, error) {
	gw, ok := e.cfg.Sandboxes.(gatewayer)
	if !ok {
		return "", &noRecordError{errors.New("this service's sandboxes have no model gateway")}
	}
	tenant, mdl, script, err := gw.GatewayOf(ctx, sb)
	if err != nil {
		return "", &noRecordError{err}
	}
	spec := runlog.Spec{Task: "model calls of sandbox " + sb, Agent: runlog.AgentSandbox, Model: mdl, Script: script,
		Sandboxes: map[string]string{runlog.DefaultSandbox: AttachPrefix + sb}}
	if err := spec.Normalize(); err != nil {
		return "", err
	}
	id, err := e.create(ctx, tenant, spec, typedEvent{runlog.EventSandboxCreated,
		runlog.SandboxEvent{Name: runlog.DefaultSandbox, ID: sb, Image: AttachPrefix + sb}})
	if err != nil {
		return "", err
	}
	e.log.Info("recording a sandbox's model calls", "sandbox", sb, "run", id)
	return id, nil
}

// noRecordError is why a sandbox's calls have no run to be recorded in
// (the sandbox is gone, or has no gateway): they are refused.
type noRecordError struct{ err error }

func (e *noRecordError) Error() string {
	return "the model calls of this sandbox cannot be recorded: " + e.err.Error()
}
func (e *noRecordError) Unwrap() error { return e.err }

// SandboxGone ends sandbox id's record run, if it has one: the sandbox
// ended (why, in words) or was deleted. The janitor does the same for
// every record whose sandbox it finds gone; this is sooner.
func (e *Engine) SandboxGone(ctx context.Context, id, why string) {
	e.mu.Lock()
	run := e.records[id]
	e.mu.Unlock()
	e.unbindGone(ctx, id)
	if run == "" {
		return
	}
	e.endRecord(ctx, run, why)
}

func (e *Engine) endRecord(ctx context.Context, run, why string) {
	err := e.steerAgent(ctx, run, func(a *agentRun) error {
		e.finishAgent(ctx, a, runlog.StatusSucceeded, "", "the sandbox ended: "+why)
		return nil
	})
	if err != nil {
		e.log.Warn("ending a sandbox's record", "run", run, "err", err)
		return
	}
	e.dropAgent(run)
}

// unbindGone forgets the binding of sandbox sb (or, with "", of every
// sandbox that is gone) to an agent run that has ended.
func (e *Engine) unbindGone(ctx context.Context, sb string) {
	e.mu.Lock()
	var ended []string
	for s, id := range e.bound {
		if a := e.agents[id]; (sb == "" || s == sb) && (a == nil || a.isEnded()) {
			ended = append(ended, s)
		}
	}
	e.mu.Unlock()
	for _, s := range ended {
		if gone, _ := e.cfg.Sandboxes.Gone(ctx, s); gone || s == sb {
			e.mu.Lock()
			delete(e.bound, s)
			e.mu.Unlock()
		}
	}
}

func (a *agentRun) isEnded() bool {
	select {
	case <-a.ended:
		return true
	default:
		return false
	}
}

// endRecords ends the record runs whose sandbox is gone, and forgets the
// ended agent runs' sandboxes that are (the janitor's).
func (e *Engine) endRecords(ctx context.Context) {
	e.unbindGone(ctx, "")
	rows, err := e.cfg.Store.ListRuns(ctx, store.RunFilter{Statuses: []string{string(runlog.StatusRunning), string(runlog.StatusPaused)}, Limit: 100000})
	if err != nil {
		return
	}
	for _, row := range rows {
		spec := specOf(row)
		if spec.Agent != runlog.AgentSandbox {
			continue
		}
		sb := strings.TrimPrefix(spec.Sandboxes[runlog.DefaultSandbox], AttachPrefix)
		if gone, why := e.cfg.Sandboxes.Gone(ctx, sb); gone {
			e.endRecord(ctx, row.ID, why)
		}
	}
}

// specOf is a run's spec as its row keeps it.
func specOf(row store.Run) runlog.Spec {
	var s runlog.Spec
	json.Unmarshal(row.Spec, &s)
	return s
}

// bind makes sb's calls run id's; it fails when another agent run works
// in sb.
func (e *Engine) bind(sb, id string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if other := e.bound[sb]; other != "" && other != id {
		if a := e.agents[other]; a == nil || a.r.st.finished == nil {
			return fmt.Errorf("sandbox %s already runs agent run %s: one agent program per sandbox", sb, other)
		}
	}
	e.bound[sb] = id
	return nil
}

func (e *Engine) unbind(sb, id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.bound[sb] == id {
		delete(e.bound, sb)
	}
}

// steerAgent runs f on agent run id's state, holding its lock.
func (e *Engine) steerAgent(ctx context.Context, id string, f func(a *agentRun) error) error {
	a, err := e.agentOf(ctx, id)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return f(a)
}

// pauseAgent pauses an agent run at once: its program runs on, and its
// next model call is held until Resume.
func (e *Engine) pauseAgent(ctx context.Context, id string) error {
	return e.steerAgent(ctx, id, func(a *agentRun) error {
		if a.r.st.paused || a.r.st.finished != nil {
			return nil
		}
		a.resume = make(chan struct{})
		return e.appendAgent(ctx, a, runlog.StatusPaused, typedEvent{runlog.EventPaused,
			runlog.Note{Message: "paused by a user: the program's next model call waits for resume"}})
	})
}

// resumeAgent lets a paused agent run's held calls through (and follows
// its program, should no worker do so).
func (e *Engine) resumeAgent(ctx context.Context, id string) error {
	defer e.launch(id, nil)
	return e.steerAgent(ctx, id, func(a *agentRun) error {
		if !a.r.st.paused || a.r.st.finished != nil {
			return nil
		}
		if err := e.appendAgent(ctx, a, runlog.StatusRunning, typedEvent{runlog.EventResumed, runlog.Note{Message: "resumed by a user"}}); err != nil {
			return err
		}
		if a.resume != nil {
			close(a.resume)
			a.resume = nil
		}
		return nil
	})
}

// cancelAgent ends an agent run that has no worker (a sandbox's record).
// A record stays bound to its sandbox, so that its calls are refused from
// now on (until the service restarts).
func (e *Engine) cancelAgent(ctx context.Context, id string) error {
	return e.steerAgent(ctx, id, func(a *agentRun) error {
		e.finishAgent(ctx, a, runlog.StatusCancelled, "", "cancelled by a user")
		return nil
	})
}
