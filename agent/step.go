package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/policy"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/tool"
	"github.com/reinsdev/reins/tool/sandboxtool"
)

// step does the next thing the log calls for: settle or run a pending tool
// call, ask the model, or finish. It returns whether there is more to do
// now (false when the run finished or parked).
func (e *Engine) step(ctx context.Context, r *run) (bool, error) {
	st := r.st
	if st.finished != nil {
		return false, nil
	}
	if st.paused {
		return false, nil
	}
	if st.waiting != nil || st.awaitingApproval() {
		if err := e.checkpoints(ctx, r, true); err != nil {
			return false, err
		}
		if err := e.append(ctx, r, runlog.StatusWaitingApproval); err != nil {
			return false, err
		}
		return false, nil
	}
	if reason := e.overBudget(st); reason != "" {
		e.finish(ctx, r, runlog.StatusFailed, "", reason)
		return false, nil
	}
	if err := e.checkpoints(ctx, r, false); err != nil {
		return false, err
	}
	if st.pending() {
		return true, e.nextCall(ctx, r)
	}
	if st.last != nil && len(st.calls()) == 0 {
		// The model answered without calling tools: that is the answer.
		e.finish(ctx, r, runlog.StatusSucceeded, st.finalText(), "")
		return false, nil
	}
	return true, e.askModel(ctx, r)
}

func (e *Engine) overBudget(st *state) string {
	s := st.spec
	switch {
	case st.steps >= s.MaxSteps && st.pending() == false && !(st.last != nil && len(st.calls()) == 0):
		return fmt.Sprintf("budget: the run used all %d steps (raise --max-steps)", s.MaxSteps)
	case s.MaxCost > 0 && st.cost >= s.MaxCost:
		return fmt.Sprintf("budget: the run cost $%.4f, over its limit of $%.4f (raise --max-cost)", st.cost, s.MaxCost)
	case s.MaxTokens > 0 && st.usage.Total() >= s.MaxTokens:
		return fmt.Sprintf("budget: the run used %d tokens, over its limit of %d", st.usage.Total(), s.MaxTokens)
	case !st.created.IsZero() && time.Since(st.created) > time.Duration(s.Timeout):
		return fmt.Sprintf("budget: the run took longer than its timeout of %s (raise --timeout)", time.Duration(s.Timeout))
	}
	return ""
}

// askModel calls the model with the conversation and records its answer.
func (e *Engine) askModel(ctx context.Context, r *run) error {
	if r.models == nil {
		m, name, err := e.openModel(ctx, r.tenant, r.st.spec)
		if err != nil {
			return err
		}
		r.models, r.name = m, name
	}
	req := &model.Request{
		Model:    r.name,
		System:   e.systemPrompt(r.st.spec),
		Messages: e.withScreenshots(ctx, r.st.conversation(8, e.cfg.MaxContextChars), r.st.spec.Screenshots()),
		Tools:    e.toolSpecs(r.st.spec),
	}
	e.failpoint("before_model")
	t0 := time.Now()
	resp, err := r.models.Generate(ctx, req)
	if err != nil {
		return fmt.Errorf("model %s: %w", r.st.spec.Model, err)
	}
	// Give every call an id (a provider may omit one) and keep the input
	// a JSON object.
	for i := range resp.Content {
		b := &resp.Content[i]
		if b.Type == model.BlockToolUse && b.ToolCallID == "" {
			b.ToolCallID = fmt.Sprintf("call_%d_%d", r.st.steps+1, i)
		}
	}
	mr := runlog.ModelResponse{Step: r.st.steps + 1, Content: resp.Content, StopReason: resp.StopReason,
		Usage: resp.Usage, CostUSD: e.cfg.Prices.Cost(r.st.spec.Model, resp.Usage), DurationMS: time.Since(t0).Milliseconds()}
	if err := e.append(ctx, r, runlog.StatusRunning, mr); err != nil {
		return err
	}
	e.failpoint("after_model")
	return nil
}

// nextCall handles the first call of the last response that has no result:
// log the intent, run it, log the result; or settle an intent a crash left.
func (e *Engine) nextCall(ctx context.Context, r *run) error {
	for _, c := range r.st.calls() {
		if _, done := r.st.results[c.ToolCallID]; done {
			continue
		}
		if intent, ok := r.st.intents[c.ToolCallID]; ok {
			return e.settle(ctx, r, intent)
		}
		input, ok, err := e.gate(ctx, r, c)
		if err != nil || !ok {
			return err
		}
		if c.ToolName == sandboxtool.ComputerName && allowed(r.st.spec, c.ToolName) {
			if ok, err := e.waitTakeover(ctx, r); err != nil || !ok {
				return err
			}
		}
		intent := runlog.ToolCall{Step: r.st.steps, CallID: c.ToolCallID, Name: c.ToolName, Input: input,
			Key: fmt.Sprintf("%s/%d/%s", r.id, r.st.steps, c.ToolCallID)}
		if c.ToolName == askHumanName {
			var in struct {
				Question string `json:"question"`
			}
			json.Unmarshal(c.Input, &in)
			return e.append(ctx, r, runlog.StatusWaitingApproval, intent, runlog.Waiting{CallID: c.ToolCallID, Question: in.Question})
		}
		if err := e.append(ctx, r, runlog.StatusRunning, intent); err != nil {
			return err
		}
		e.failpoint("after_intent")
		res, arts := e.call(ctx, r, intent, false)
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		evs := append(e.egressEvents(ctx, r), e.noteEvents(r)...)
		if err := e.append(ctx, r, "", append(evs, withArtifacts(res, arts)...)...); err != nil {
			return err
		}
		e.failpoint("after_result")
		return nil
	}
	return nil
}

// settle decides an intent that has no result after a restart: sandbox tools
// are asked again by idempotency key where that cannot run them twice;
// everything else is reported to the model as an unknown outcome.
func (e *Engine) settle(ctx context.Context, r *run, intent runlog.ToolCall) error {
	var res runlog.ToolResult
	var arts []runlog.Artifact
	if t := e.findTool(intent.Name); t != nil && settleSafe(t.Spec()) {
		res, arts = e.call(ctx, r, intent, true)
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
	} else {
		res = runlog.ToolResult{Step: intent.Step, CallID: intent.CallID, Name: intent.Name, IsError: true, Unknown: true,
			Text: "The service restarted while this call was running, and whether it completed is unknown. " +
				"It was not run again. Check its effects before repeating it."}
	}
	return e.append(ctx, r, "", withArtifacts(res, arts)...)
}

// withArtifacts are the events that record a call's outcome: the
// artifacts it saved, then its result, appended together.
func withArtifacts(res runlog.ToolResult, arts []runlog.Artifact) []any {
	evs := make([]any, 0, len(arts)+1)
	for _, a := range arts {
		evs = append(evs, a)
	}
	return append(evs, res)
}

// call runs one tool call and returns its result and the artifacts it
// saved; tool failures become error results the model can read. With
// recovering, the call is a retry of an intent logged before a crash.
func (e *Engine) call(ctx context.Context, r *run, intent runlog.ToolCall, recovering bool) (runlog.ToolResult, []runlog.Artifact) {
	t0 := time.Now()
	res := runlog.ToolResult{Step: intent.Step, CallID: intent.CallID, Name: intent.Name}
	t := e.findTool(intent.Name)
	if t == nil || !allowed(r.st.spec, intent.Name) {
		res.IsError, res.Text = true, fmt.Sprintf("unknown tool %q: use one of %s", intent.Name, strings.Join(e.toolNames(r.st.spec), ", "))
		return res, nil
	}
	if c := r.st.call(intent.CallID); c != nil && c.InputError != "" {
		res.IsError = true
		res.Text = fmt.Sprintf("your arguments for %s were not valid JSON (%s), so it did not run. Its input schema is: %s",
			intent.Name, c.InputError, compact(t.Spec().InputSchema))
		return res, nil
	}
	if err := validateInput(t.Spec().InputSchema, intent.Input); err != nil {
		res.IsError = true
		res.Text = fmt.Sprintf("invalid arguments for %s: %v. Its input schema is: %s", intent.Name, err, compact(t.Spec().InputSchema))
		return res, nil
	}
	var out tool.Result
	var err error
	if st, ok := t.(sandboxtool.Tool); ok {
		out, err = e.callSandbox(ctx, r, st, intent, recovering)
	} else {
		out, err = t.Call(ctx, intent.Key, intent.Input)
	}
	res.DurationMS = time.Since(t0).Milliseconds()
	if err != nil {
		// The model and the tenant read it: no host path.
		res.IsError, res.Text = true, errdefs.Public(err)
		return res, nil
	}
	res.IsError = out.IsError
	res.Untrusted = policy.Untrusted(t.Spec())
	e.fitResult(ctx, r, &res, out)
	return res, e.artifacts(ctx, &res, out.Artifacts)
}

// artifacts turns what a call saved into the events that record it,
// storing those the tool handed over as bytes. One that cannot be stored
// is told to the model rather than dropped.
func (e *Engine) artifacts(ctx context.Context, res *runlog.ToolResult, arts []tool.Artifact) []runlog.Artifact {
	var out []runlog.Artifact
	for _, a := range arts {
		if a.Digest == "" {
			d, size, err := e.cfg.Blobs.Put(ctx, bytes.NewReader(a.Data))
			if err != nil {
				res.Text += fmt.Sprintf("\n[artifact %q could not be stored: %v]", a.Name, err)
				res.IsError = true
				continue
			}
			a.Digest, a.Size = d, size
		}
		out = append(out, runlog.Artifact{Name: a.Name, Digest: a.Digest, Size: a.Size, Source: a.Source})
	}
	return out
}

// Results longer than this are stored whole as an artifact; the model gets
// the head and the tail with a pointer.
const maxResultText = 30_000

func (e *Engine) fitResult(ctx context.Context, r *run, res *runlog.ToolResult, out tool.Result) {
	defer e.storeImages(ctx, res, out.Images)
	res.Text = out.Text
	if len(out.Text) <= maxResultText {
		return
	}
	digest, _, err := e.cfg.Blobs.Put(ctx, strings.NewReader(out.Text))
	if err != nil {
		res.Text = out.Text[:maxResultText/2] + "\n[… output cut: it could not be stored whole …]\n" + out.Text[len(out.Text)-maxResultText/2:]
		return
	}
	res.Artifact, res.FullBytes = digest, len(out.Text)
	head, tail := out.Text[:maxResultText/2], out.Text[len(out.Text)-maxResultText/3:]
	res.Text = fmt.Sprintf("%s\n[… %d bytes cut from the middle; the whole output (%d bytes) is saved as artifact %s …]\n%s",
		head, len(out.Text)-len(head)-len(tail), len(out.Text), digest, tail)
}

// storeImages keeps a result's images in the blob store and records them
// by digest.
func (e *Engine) storeImages(ctx context.Context, res *runlog.ToolResult, images [][]byte) {
	for i, img := range images {
		// The bytes came from a sandbox: a PNG within bounds is kept
		// (real .png artifacts, loaded for the model by reference),
		// anything else is told to the model, not stored.
		if _, _, err := tool.CheckPNG(img); err != nil {
			res.Text += fmt.Sprintf("\n[image %d of this result was dropped: %v]", i+1, errdefs.Public(err))
			continue
		}
		d, size, err := e.cfg.Blobs.Put(ctx, bytes.NewReader(img))
		if err != nil {
			res.Text += fmt.Sprintf("\n[image %d of this result could not be stored: %v]", i+1, errdefs.Public(err))
			continue
		}
		res.Images = append(res.Images, d)
		res.ImageBytes = append(res.ImageBytes, size)
	}
}

func compact(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// isGone reports whether err says the sandbox itself is gone or dead.
func isGone(err error) bool {
	return errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrFailedPrecondition) ||
		errors.Is(err, errdefs.ErrUnavailable)
}
