package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
)

// MaxWaitSeconds bounds how long run_start and run_get wait for a run.
const MaxWaitSeconds = 600

type runStartArgs struct {
	Task        string         `json:"task" jsonschema:"what the agent is to do"`
	Model       string         `json:"model,omitempty" jsonschema:"provider:model, such as anthropic:claude-sonnet-4-5 (default: the service's); with script, ignored"`
	Script      map[string]any `json:"script,omitempty" jsonschema:"a script: model played turn by turn, for tests and demos: {\"turns\": [{\"tool_calls\": [{\"name\": \"bash\", \"input\": {\"command\": \"ls\"}}]}, {\"text\": \"done\"}]}"`
	Image       string         `json:"image,omitempty" jsonschema:"the image of the sandbox the run makes (default busybox)"`
	SandboxID   string         `json:"sandbox_id,omitempty" jsonschema:"run in this existing sandbox instead of a new one"`
	MaxSteps    int            `json:"max_steps,omitempty" jsonschema:"the most model turns (default: the service's)"`
	WaitSeconds int            `json:"wait_seconds,omitempty" jsonschema:"wait this long for the run to end before answering (0: answer at once; at most 600)"`
}

type runGetArgs struct {
	RunID       string `json:"run_id" jsonschema:"the run's id, as run_start answered it"`
	WaitSeconds int    `json:"wait_seconds,omitempty" jsonschema:"wait this long for the run to end before answering (0: answer at once; at most 600)"`
}

func (t *tools) addRunTools(s *sdk.Server) {
	sdk.AddTool(s, &sdk.Tool{
		Name: "run_start",
		Description: "Start a reins agent run: an agent loop in the service works on task with its own sandbox and tools, " +
			"recorded durably; answers the run (id, status; with wait_seconds, its final text once it ends).",
		Annotations: &sdk.ToolAnnotations{Title: "Start an agent run", DestructiveHint: boolp(false), OpenWorldHint: boolp(true)},
	}, t.runStart)
	sdk.AddTool(s, &sdk.Tool{
		Name:        "run_get",
		Description: "Answer a run's status, steps, cost, final text or failure reason, and its sandboxes; wait_seconds waits for it to end.",
		Annotations: &sdk.ToolAnnotations{Title: "Get an agent run", ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: boolp(false)},
	}, t.runGet)
}

func (t *tools) runStart(ctx context.Context, req *sdk.CallToolRequest, a runStartArgs) (*sdk.CallToolResult, any, error) {
	if strings.TrimSpace(a.Task) == "" {
		return nil, nil, argError("task", "is empty: say what the agent is to do")
	}
	if a.WaitSeconds < 0 || a.WaitSeconds > MaxWaitSeconds {
		return nil, nil, argError("wait_seconds", "%d is outside 0-%d", a.WaitSeconds, MaxWaitSeconds)
	}
	if a.MaxSteps < 0 {
		return nil, nil, argError("max_steps", "%d is negative", a.MaxSteps)
	}
	if a.Image != "" && a.SandboxID != "" {
		return nil, nil, argError("image", "give image or sandbox_id, not both: a run in an existing sandbox uses its image")
	}
	spec := &reinsv1.RunSpec{Task: a.Task, Model: a.Model, MaxSteps: int32(a.MaxSteps)}
	if a.Script != nil {
		js, err := json.Marshal(a.Script)
		if err != nil {
			return nil, nil, argError("script", "does not encode: %v", err)
		}
		spec.Model, spec.Script = "script:mcp", string(js)
	}
	switch {
	case a.SandboxID != "":
		spec.Sandboxes = map[string]string{"default": "sandbox:" + a.SandboxID}
	case a.Image != "":
		spec.Sandboxes = map[string]string{"default": a.Image}
	}
	run, err := t.c.StartRun(ctx, spec)
	if err != nil {
		return nil, nil, err
	}
	return t.answerRun(ctx, run, a.WaitSeconds)
}

func (t *tools) runGet(ctx context.Context, req *sdk.CallToolRequest, a runGetArgs) (*sdk.CallToolResult, any, error) {
	if a.RunID == "" {
		return nil, nil, argError("run_id", "is empty: give the id run_start answered")
	}
	if a.WaitSeconds < 0 || a.WaitSeconds > MaxWaitSeconds {
		return nil, nil, argError("wait_seconds", "%d is outside 0-%d", a.WaitSeconds, MaxWaitSeconds)
	}
	run, err := t.c.GetRun(ctx, a.RunID)
	if err != nil {
		return nil, nil, err
	}
	return t.answerRun(ctx, run, a.WaitSeconds)
}

// answerRun answers run, after waiting up to wait seconds for it to end.
func (t *tools) answerRun(ctx context.Context, run *reinsv1.Run, wait int) (*sdk.CallToolResult, any, error) {
	deadline := time.Now().Add(time.Duration(wait) * time.Second)
	for !ended(run.GetStatus()) && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
		var err error
		if run, err = t.c.GetRun(ctx, run.GetId()); err != nil {
			return nil, nil, err
		}
	}
	js, err := protoJSON(run)
	if err != nil {
		return nil, nil, err
	}
	status := strings.ToLower(strings.TrimPrefix(run.GetStatus().String(), "RUN_STATUS_"))
	text := fmt.Sprintf("run %s: %s after %d steps", run.GetId(), status, run.GetSteps())
	switch {
	case run.GetText() != "":
		text += "\n" + run.GetText()
	case run.GetReason() != "":
		text += ": " + run.GetReason()
	}
	if len(run.GetPending()) > 0 {
		text += fmt.Sprintf("\n%d call(s) wait for approval: reins runs approve %s", len(run.GetPending()), run.GetId())
	}
	return result(text, js), nil, nil
}

func ended(s reinsv1.RunStatus) bool {
	switch s {
	case reinsv1.RunStatus_RUN_STATUS_SUCCEEDED, reinsv1.RunStatus_RUN_STATUS_FAILED, reinsv1.RunStatus_RUN_STATUS_CANCELLED:
		return true
	}
	return false
}
