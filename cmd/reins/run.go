package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/reinsdev/reins/agent"
	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/server/wire"
)

func runCmd() *cobra.Command {
	var (
		spec            reinsv1.RunSpec
		image           string
		in              string
		policyFile      string
		sandboxes       kvFlag
		systemFile      string
		timeout         time.Duration
		detach          bool
		asJSON          bool
		network         *networkFlags
		memory          sizeFlag
		checkpointEvery int32
		uploads         []string
		outDir          string
	)
	c := &cobra.Command{
		Use:   "run [flags] TASK",
		Short: "Run an agent on a task, shown live; exits 0 when it succeeds",
		Long: `Run an agent on a task. The agent loop runs in reins serve; the agent's
tools run in isolated sandboxes created on first use. A sandbox with a
display (--image desktop) adds the computer tool: screenshots, mouse and
keyboard; the model is shown the newest --keep-screenshots of them.

Models: anthropic:MODEL (ANTHROPIC_API_KEY), openai:MODEL (OPENAI_API_KEY,
OPENAI_BASE_URL for Ollama, vLLM, llama.cpp), script:FILE (a deterministic
script, for tests and demos). Keys are read by reins serve, not by this
command; a script FILE is read by this command and sent to the service.

With --agent, an agent program runs inside the sandbox instead of reins'
loop: claude-code (Claude Code), codex (OpenAI's Codex CLI), or
cmd:"PROGRAM ARGS" (your own, under sh -c, the task in $REINS_TASK). It
calls models through reins' model gateway and never holds a key; each call
is recorded, budgeted (--max-steps counts model calls) and pausable. Its
sandbox defaults to the agents image (busybox for cmd:) and 2 GiB of
memory. --model anthropic:NAME (claude-code) or openai:NAME (codex) tells
the program its model; any --model, script: too, receives every call; with
none, each call goes to the provider of its wire as asked.`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			spec.Task = strings.Join(args, " ")
			var err error
			if spec.Network, err = network.spec(); err != nil {
				return err
			}
			if spec.Model, spec.Script, err = modelArg(spec.Model); err != nil {
				return err
			}
			if policyFile != "" {
				data, err := os.ReadFile(policyFile)
				if err != nil {
					return usageError{fmt.Errorf("--policy: %w", err)}
				}
				spec.Policy = string(data)
			}
			spec.Sandboxes = sandboxes.Map()
			if image != "" && in != "" {
				return usageError{errors.New("use either --image or --in, not both")}
			}
			if in != "" {
				image = agent.AttachPrefix + in
			}
			if image != "" {
				if len(spec.Sandboxes) > 0 {
					return usageError{errors.New("use either --image/--in or --sandbox NAME=IMAGE, not both")}
				}
				spec.Sandboxes = map[string]string{runlog.DefaultSandbox: image}
			}
			if systemFile != "" {
				data, err := os.ReadFile(systemFile)
				if err != nil {
					return usageError{fmt.Errorf("--system: %w", err)}
				}
				spec.System = string(data)
			}
			if timeout < 0 || spec.MaxSteps < 0 || spec.MaxCostUsd < 0 || spec.KeepScreenshots < 0 {
				return usageError{errors.New("--timeout, --max-steps, --max-cost and --keep-screenshots must not be negative")}
			}
			spec.TimeoutMs = timeout.Milliseconds()
			if c.Flags().Changed("checkpoint-every") {
				if checkpointEvery < 0 {
					return usageError{errors.New("--checkpoint-every must not be negative (0: no checkpoints)")}
				}
				spec.CheckpointEvery = &checkpointEvery
			}
			spec.MemoryBytes = memory.v
			if spec.MemoryBytes != 0 && spec.Agent == "" {
				return usageError{errors.New("--memory is for agent runs (--agent): reins' own loop sizes its sandboxes with the service's defaults")}
			}
			if spec.MemoryBytes != 0 && in != "" {
				return usageError{errors.New("--memory sizes a new sandbox; --in works in one that has its limit already (reins sandbox create --memory)")}
			}
			var archive []byte
			if len(uploads) > 0 {
				if archive, err = packUploads(uploads); err != nil {
					return err
				}
			}
			if outDir != "" && len(spec.Downloads) == 0 {
				return usageError{errors.New("--out is where --download's files go: add --download PATH")}
			}
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			if err := prepareImages(ctx, cl, spec.Sandboxes); err != nil {
				return err
			}
			run, err := cl.StartRunWithUploads(ctx, &spec, archive)
			if err != nil {
				return err
			}
			if detach {
				if asJSON {
					return json.NewEncoder(c.OutOrStdout()).Encode(map[string]string{"id": run.Id})
				}
				fmt.Fprintln(c.OutOrStdout(), run.Id)
				return nil
			}
			err = watchRun(ctx, cl, run.Id, c.OutOrStdout(), asJSON)
			var ee exitError
			if len(spec.Downloads) > 0 && (err == nil || errors.As(err, &ee) && ee.code != 130) {
				// However the run ended, its downloads were saved.
				if ferr := fetchDownloads(context.Background(), cl, run.Id, cmp.Or(outDir, filepath.Join("reins-out", run.Id)), asJSON); ferr != nil {
					return ferr
				}
			}
			return err
		},
	}
	f := c.Flags()
	f.StringVar(&spec.Model, "model", "", "provider:model, e.g. anthropic:claude-sonnet-4-5, openai:gpt-4.1, script:./x.json (default: the service's)")
	f.StringVar(&image, "image", "", "image of the run's sandbox (default busybox; agents for --agent claude-code or codex)")
	f.StringVar(&spec.Agent, "agent", "", `run an agent program in the sandbox: claude-code, codex or cmd:"PROGRAM ARGS"`)
	f.Var(&memory, "memory", "memory limit of an agent run's sandbox, e.g. 4G (default 2G)")
	f.StringVar(&in, "in", "", "work in this existing sandbox (ID) instead of a new one; it is kept after the run (no such sandbox: no run)")
	f.Var(&sandboxes, "sandbox", "a named sandbox NAME=IMAGE (repeatable; tools then take a sandbox name)")
	f.StringVar(&systemFile, "system", "", "file with a system prompt to add")
	f.StringVar(&policyFile, "policy", "", "policy file (YAML or JSON): per-tool allow/ask/deny and rules")
	f.Int32Var(&spec.MaxSteps, "max-steps", 0, "most model calls (default 50; 500 for --agent)")
	f.Int32Var(&checkpointEvery, "checkpoint-every", runlog.DefaultCheckpointEvery,
		"save the sandboxes' files every N mutating tool calls (bash, write_file, edit_file) and before the run parks; a lost sandbox and a fork restore them (0: never)")
	f.Int32Var(&spec.KeepScreenshots, "keep-screenshots", 0,
		fmt.Sprintf("show the model only the newest N screenshots of the computer tool, older ones as a line saying so (default %d)", runlog.DefaultKeepScreenshots))
	f.Float64Var(&spec.MaxCostUsd, "max-cost", 0, "most US dollars to spend (from the price table)")
	f.DurationVar(&timeout, "timeout", 0, "most wall time (default 1h)")
	f.BoolVarP(&detach, "detach", "d", false, "print the run id and return at once")
	f.BoolVar(&asJSON, "json", false, "print one JSON object at the end (with --detach: the id)")
	f.StringArrayVar(&uploads, "upload", nil, "put a local file or directory into the run's sandbox before it starts: LOCAL[:DEST] (DEST default /workspace/NAME; repeatable; 12 MiB in all)")
	f.StringArrayVar(&spec.Downloads, "download", nil, "bring this sandbox path or glob back when the run ends, however it ends (repeatable; saved as the run's artifacts)")
	f.StringVar(&outDir, "out", "", "where --download's files go (default ./reins-out/RUN_ID)")
	network = addNetworkFlags(f, true)
	return c
}

// watchRun follows a run's events, showing them live, and returns an exit
// error unless it succeeded.
func watchRun(ctx context.Context, cl *client.Client, id string, out io.Writer, asJSON bool) error {
	v := newRunView(out, asJSON)
	v.header(id)
	err := cl.RunEvents(ctx, id, 0, true, func(ev *reinsv1.RunEvent) error {
		v.event(ctx, cl, id, ev)
		return nil
	})
	v.status.Done()
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(os.Stderr, "\nreins: stopped watching; the run goes on: reins runs events --follow %s (or reins runs cancel %s)\n", id, id)
			return exitError{130}
		}
		return err
	}
	run, err := cl.GetRun(context.Background(), id)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(out, run)
	}
	v.footer(run)
	if run.Status != reinsv1.RunStatus_RUN_STATUS_SUCCEEDED {
		return exitError{1}
	}
	return nil
}

// runView renders a run's events for a person.
type runView struct {
	out    io.Writer
	quiet  bool // --json: nothing but the final object
	status *statusLine
	start  time.Time
	step   int
	tokens int64 // input and output, as the model responses so far report
	cost   float64
	calls  map[string]string // call id → short description
	tty    bool
	replay bool // rendering a finished log: ask nothing
}

func newRunView(out io.Writer, quiet bool) *runView {
	return &runView{out: out, quiet: quiet, status: newStatusLine(os.Stderr), start: time.Now(),
		calls: map[string]string{}, tty: term.IsTerminal(int(os.Stdout.Fd()))}
}

func (v *runView) printf(format string, args ...any) {
	if v.quiet {
		return
	}
	v.status.Done()
	fmt.Fprintf(v.out, format, args...)
}

func (v *runView) style(code, s string) string {
	if !v.tty {
		return s
	}
	return "\033[" + code + "m" + s + "\033[0m"
}

func (v *runView) header(id string) {
	v.printf("%s %s\n", v.style("1", "run"), id)
}

func (v *runView) event(ctx context.Context, cl *client.Client, id string, ev *reinsv1.RunEvent) {
	switch ev.Type {
	case reinsv1.EventType_EVENT_TYPE_MODEL_RESPONSE:
		d := ev.GetModelResponse()
		u := d.GetUsage()
		v.step, v.cost = int(d.GetStep()), v.cost+d.GetCostUsd()
		v.tokens += u.GetInputTokens() + u.GetOutputTokens()
		if d.GetGateway() != nil {
			v.gatewayCall(d)
			break
		}
		final := true
		for _, b := range d.GetContent() {
			final = final && b.Type != reinsv1.BlockType_BLOCK_TYPE_TOOL_USE
		}
		for _, b := range d.GetContent() {
			switch b.Type {
			case reinsv1.BlockType_BLOCK_TYPE_TEXT:
				// The final answer is printed last, once.
				if t := strings.TrimSpace(b.Text); t != "" && !final {
					v.printf("%s\n", t)
				}
			case reinsv1.BlockType_BLOCK_TYPE_TOOL_USE:
				v.calls[b.ToolCallId] = describeCall(b.ToolName, b.InputJson)
			}
		}
	case reinsv1.EventType_EVENT_TYPE_TOOL_CALL:
		v.printf("%s %s\n", v.style("36", "▸"), v.calls[ev.GetToolCall().GetCallId()])
	case reinsv1.EventType_EVENT_TYPE_TOOL_RESULT:
		d := ev.GetToolResult()
		mark := v.style("32", "  ✓")
		if d.GetIsError() {
			mark = v.style("31", "  ✗")
		}
		v.printf("%s %s\n", mark, summarize(d.GetText(), 3))
	case reinsv1.EventType_EVENT_TYPE_SANDBOX_CREATED:
		d := ev.GetSandbox()
		if strings.HasPrefix(d.GetImage(), agent.AttachPrefix) {
			v.printf("%s sandbox %s attached: %s\n", v.style("35", "◆"), d.GetName(), d.GetId())
		} else {
			v.printf("%s sandbox %s (%s) created: %s\n", v.style("35", "◆"), d.GetName(), d.GetImage(), d.GetId())
		}
	case reinsv1.EventType_EVENT_TYPE_SANDBOX_LOST:
		d := ev.GetSandbox()
		v.printf("%s sandbox %s lost: %s\n", v.style("33", "◆"), d.GetName(), d.GetReason())
	case reinsv1.EventType_EVENT_TYPE_SANDBOX_REPLACED:
		d := ev.GetSandbox()
		v.printf("%s sandbox %s replaced by %s: %s\n", v.style("33", "◆"), d.GetName(), d.GetId(), d.GetNote())
	case reinsv1.EventType_EVENT_TYPE_SANDBOX_SUSPENDED, reinsv1.EventType_EVENT_TYPE_SANDBOX_RESUMED:
		d := ev.GetSandbox()
		what := "suspended"
		if ev.Type == reinsv1.EventType_EVENT_TYPE_SANDBOX_RESUMED {
			what = "resumed"
		}
		v.printf("%s sandbox %s %s: %s\n", v.style("35", "◆"), d.GetName(), what, d.GetNote())
	case reinsv1.EventType_EVENT_TYPE_SANDBOX_LIFECYCLE:
		d := ev.GetSandbox()
		v.printf("%s sandbox %s %s: %s\n", v.style("33", "◆"), d.GetName(), d.GetReason(), d.GetNote())
	case reinsv1.EventType_EVENT_TYPE_TAKEOVER:
		d := ev.GetSandbox()
		v.printf("%s %s took over the screen of sandbox %s: the run's computer calls wait for the hand-back\n", v.style("33", "◆"), d.GetBy(), d.GetName())
	case reinsv1.EventType_EVENT_TYPE_HANDBACK:
		d := ev.GetSandbox()
		v.printf("%s %s handed the screen of sandbox %s back: the run goes on\n", v.style("35", "◆"), d.GetBy(), d.GetName())
	case reinsv1.EventType_EVENT_TYPE_CHECKPOINT:
		d := ev.GetCheckpoint()
		v.printf("%s checkpoint of sandbox %s after event %d: %s (%s in %d files; %s)\n", v.style("35", "◆"), d.GetSandbox(),
			d.GetSeq(), d.GetDigest(), humanBytes(d.GetBytes()), d.GetFiles(), d.GetReason())
	case reinsv1.EventType_EVENT_TYPE_CHECKPOINT_FAILED:
		d := ev.GetCheckpoint()
		v.printf("%s no checkpoint of sandbox %s after event %d (the run goes on): %s\n", v.style("33", "◆"), d.GetSandbox(),
			d.GetSeq(), summarize(d.GetError(), 1))
	case reinsv1.EventType_EVENT_TYPE_EGRESS:
		v.egress(ev.GetEgress())
	case reinsv1.EventType_EVENT_TYPE_AGENT_STARTED:
		d := ev.GetAgentProgram()
		v.printf("%s program started in %s (pid %d): %s\n", v.style("35", "◆"), d.GetSandbox(), d.GetPid(), agentCommand(d.GetArgv()))
	case reinsv1.EventType_EVENT_TYPE_WAITING:
		v.ask(ctx, cl, id, ev.GetWaiting().GetQuestion())
	case reinsv1.EventType_EVENT_TYPE_ARTIFACT:
		d := ev.GetArtifact()
		v.printf("%s artifact %s (%d bytes)\n", v.style("35", "◆"), d.GetName(), d.GetSize())
	case reinsv1.EventType_EVENT_TYPE_APPROVAL_REQUESTED:
		if d := ev.GetApprovalRequested(); d != nil {
			v.approve(ctx, cl, id, d)
		}
	case reinsv1.EventType_EVENT_TYPE_APPROVAL_DECIDED:
		d := ev.GetApprovalDecided()
		verdict := v.style("32", "approved")
		if !d.GetApproved() {
			verdict = v.style("31", "denied") + ": " + d.GetReason()
		}
		v.printf("  %s by %s\n", verdict, d.GetActor())
	case reinsv1.EventType_EVENT_TYPE_POLICY_DECISION:
		d := ev.GetPolicyDecision()
		if d.GetAction() == reinsv1.PolicyAction_POLICY_ACTION_DENY {
			v.printf("%s %s denied by policy (%s): %s\n", v.style("31", "✗"), d.GetTool(), d.GetRule(), d.GetReason())
		}
	case reinsv1.EventType_EVENT_TYPE_PAUSED, reinsv1.EventType_EVENT_TYPE_RESUMED:
		v.printf("%s %s\n", v.style("33", "◆"), strings.ReplaceAll(eventName(ev.Type), "_", " "))
	case reinsv1.EventType_EVENT_TYPE_FORKED:
		d := ev.GetForked()
		v.printf("%s forked from %s at event %d\n", v.style("33", "◆"), d.GetFrom(), d.GetAtSeq())
		for _, name := range slices.Sorted(maps.Keys(d.GetSnapshots())) {
			v.printf("  sandbox %s starts from checkpoint %s\n", name, d.GetSnapshots()[name])
		}
	case reinsv1.EventType_EVENT_TYPE_FINISHED:
		return
	}
	if !v.quiet {
		v.status.show(fmt.Sprintf("step %d · %d tokens · $%.4f · %s", v.step,
			v.tokens, v.cost, time.Since(v.start).Round(100*time.Millisecond)), true)
	}
}

// gatewayCall prints one model call an agent program made through the
// gateway as a turn of the conversation: what was new in its request
// (tool results, a person's message), the model's text and tool calls,
// then the call's model, usage, cost and latency.
func (v *runView) gatewayCall(d *reinsv1.ModelResponse) {
	g := d.GetGateway()
	for _, b := range g.GetNew() {
		switch b.Type {
		case reinsv1.BlockType_BLOCK_TYPE_TOOL_RESULT:
			mark := v.style("32", "  ✓")
			if b.IsError {
				mark = v.style("31", "  ✗")
			}
			v.printf("%s %s\n", mark, summarize(b.Text, 3))
		case reinsv1.BlockType_BLOCK_TYPE_TEXT:
			if t := strings.TrimSpace(b.Text); t != "" && d.GetStep() > 1 {
				v.printf("%s %s\n", v.style("36", "»"), summarize(t, 3))
			}
		}
	}
	for _, b := range d.GetContent() {
		switch b.Type {
		case reinsv1.BlockType_BLOCK_TYPE_TEXT:
			if t := strings.TrimSpace(b.Text); t != "" {
				v.printf("%s\n", summarize(t, 6))
			}
		case reinsv1.BlockType_BLOCK_TYPE_TOOL_USE:
			v.calls[b.ToolCallId] = describeCall(b.ToolName, b.InputJson)
			v.printf("%s %s\n", v.style("36", "▸"), v.calls[b.ToolCallId])
		}
	}
	u := d.GetUsage()
	model := cmp.Or(g.GetModel(), g.GetAsked())
	line := fmt.Sprintf("call %d · %s · %d in, %d out", d.GetStep(), model, u.GetInputTokens(), u.GetOutputTokens())
	if c := u.GetCacheReadTokens(); c > 0 {
		line += fmt.Sprintf(" (%d cached)", c)
	}
	line += fmt.Sprintf(" · $%.4f · first byte %dms, %dms", d.GetCostUsd(), g.GetFirstByteMs(), d.GetDurationMs())
	if g.GetStatus() != 0 && (g.GetStatus() < 200 || g.GetStatus() > 299) {
		line += fmt.Sprintf(" · %s %d: %s", v.style("31", "✗"), g.GetStatus(), summarize(g.GetError(), 1))
	}
	v.printf("  %s\n", v.style("2", line))
}

// runModel names what drives a run in a listing: its model, and its
// agent program when it has one.
func runModel(s *reinsv1.RunSpec) string {
	switch {
	case s.GetAgent() == "":
		return s.GetModel()
	case s.GetModel() == "":
		return s.GetAgent()
	}
	return s.GetAgent() + " · " + s.GetModel()
}

// agentCommand is an agent program's command line, without the sh that
// makes its TMPDIR.
func agentCommand(argv []string) string {
	if len(argv) > 4 && argv[0] == "sh" && argv[3] == "reins-agent" {
		argv = argv[4:]
	}
	return summarize(strings.Join(argv, " "), 1)
}

// egress prints what a run's sandbox reached out to: each refusal on a
// line of its own (what an operator looks for), the allowed ones counted.
func (v *runView) egress(d *reinsv1.Egress) {
	allowed := 0
	for _, e := range d.GetEntries() {
		if e.GetAllowed() {
			allowed++
			continue
		}
		target := e.GetHost()
		if target == "" {
			target = e.GetAddr()
		} else if e.GetPort() != 0 {
			target += fmt.Sprintf(":%d", e.GetPort())
		}
		v.printf("  %s %s %s refused: %s\n", v.style("31", "⊘"), e.GetProto(), target, e.GetRule())
	}
	if allowed > 0 {
		v.printf("  %s %d connection(s) out, allowed\n", v.style("35", "⇢"), allowed)
	}
	if d.GetOmitted() > 0 {
		v.printf("  %s %d more in reins sandbox egress %s\n", v.style("35", "⇢"), d.GetOmitted(), d.GetId())
	}
}

// eventName, runStatusName, sandboxStateName and sandboxReasonName name
// wire values as the log and the human views do ("tool_call",
// "succeeded"); a value this build does not know keeps its wire name.
func eventName(t reinsv1.EventType) string { return cmp.Or(wire.EventTypeFromProto(t), t.String()) }
func runStatusName(s reinsv1.RunStatus) string {
	return cmp.Or(string(wire.RunStatusFromProto(s)), s.String())
}
func sandboxStateName(s reinsv1.SandboxState) string {
	return cmp.Or(string(wire.SandboxStateFromProto(s)), s.String())
}
func sandboxReasonName(r reinsv1.SandboxReason) string {
	if r == reinsv1.SandboxReason_SANDBOX_REASON_UNSPECIFIED {
		return ""
	}
	return cmp.Or(string(wire.SandboxReasonFromProto(r)), r.String())
}

// eventLine is an event's payload on one line: its API JSON without the
// fields left empty.
func eventLine(ev *reinsv1.RunEvent) string {
	m := eventPayload(ev)
	if m == nil {
		return ""
	}
	data, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return ""
	}
	var buf bytes.Buffer
	if json.Compact(&buf, data) != nil {
		return string(data)
	}
	return buf.String()
}

// eventPayload is the message in an event's payload, or nil.
func eventPayload(ev *reinsv1.RunEvent) proto.Message {
	f := ev.ProtoReflect().WhichOneof(ev.ProtoReflect().Descriptor().Oneofs().ByName("payload"))
	if f == nil {
		return nil
	}
	return ev.ProtoReflect().Get(f).Message().Interface()
}

// parseRunStatuses reads --status values: the log's names (waiting_approval)
// or the wire's (RUN_STATUS_WAITING_APPROVAL).
func parseRunStatuses(names []string) ([]reinsv1.RunStatus, error) {
	var out []reinsv1.RunStatus
	for _, n := range names {
		v, ok := reinsv1.RunStatus_value["RUN_STATUS_"+strings.TrimPrefix(strings.ToUpper(n), "RUN_STATUS_")]
		s := reinsv1.RunStatus(v)
		if !ok || s == reinsv1.RunStatus_RUN_STATUS_UNSPECIFIED {
			return nil, usageError{fmt.Errorf("--status %q: use queued, running, waiting_approval, paused, succeeded, failed or cancelled", n)}
		}
		out = append(out, s)
	}
	return out, nil
}

// approve asks a person at the terminal to decide a held call.
func (v *runView) approve(ctx context.Context, cl *client.Client, id string, d *reinsv1.ApprovalRequested) {
	v.printf("%s %s %s\n  rule %s: %s\n", v.style("33;1", "? approve"), d.Tool, summarize(d.InputJson, 4), d.Rule, d.Reason)
	if v.replay {
		return
	}
	if v.quiet || !term.IsTerminal(int(os.Stdin.Fd())) {
		v.printf("  decide with: reins runs approve %s --call %s   or   reins runs deny %s --call %s --reason \"…\"\n", id, d.CallId, id, d.CallId)
		return
	}
	in := bufio.NewReader(os.Stdin)
	for {
		fmt.Fprint(v.out, "  [a]pprove, [A]lways, [d]eny, [e]dit: ")
		line, err := in.ReadString('\n')
		if err != nil {
			return
		}
		var derr error
		switch strings.TrimSpace(line) {
		case "a", "y", "yes":
			derr = cl.Approve(ctx, id, d.CallId, "", false)
		case "A", "always":
			derr = cl.Approve(ctx, id, d.CallId, "", true)
		case "d", "n", "no":
			fmt.Fprint(v.out, "  reason: ")
			reason, _ := in.ReadString('\n')
			derr = cl.Deny(ctx, id, d.CallId, strings.TrimSpace(reason))
		case "e", "edit":
			fmt.Fprint(v.out, "  arguments (JSON, one line): ")
			edit, _ := in.ReadString('\n')
			derr = cl.Approve(ctx, id, d.CallId, strings.TrimSpace(edit), false)
		default:
			continue
		}
		if derr == nil {
			return
		}
		v.printf("  reins: %v\n", derr)
	}
}

// ask answers an ask_human inline when a person is at the terminal.
func (v *runView) ask(ctx context.Context, cl *client.Client, id, q string) {
	v.printf("%s %s\n", v.style("33;1", "? the agent asks:"), q)
	if v.replay {
		return
	}
	if v.quiet || !term.IsTerminal(int(os.Stdin.Fd())) {
		v.printf("  answer with: reins runs answer %s \"…\"\n", id)
		return
	}
	fmt.Fprint(v.out, "  your answer: ")
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil {
		return
	}
	if err := cl.AnswerRun(ctx, id, strings.TrimSpace(line)); err != nil {
		v.printf("reins: %v\n", err)
	}
}

func (v *runView) footer(run *reinsv1.Run) {
	v.printf("\n")
	switch run.Status {
	case reinsv1.RunStatus_RUN_STATUS_SUCCEEDED:
		if run.Text != "" {
			v.printf("%s\n", run.Text)
		}
	default:
		v.printf("%s %s\n", v.style("31;1", "run "+runStatusName(run.Status)+":"), run.Reason)
	}
	v.printf("\n%s · %d steps · %d tokens · $%.4f · %s\n", runStatusName(run.Status), run.Steps,
		run.Usage.GetInputTokens()+run.Usage.GetOutputTokens(), run.CostUsd, time.Since(v.start).Round(100*time.Millisecond))
	v.printf("inspect: reins runs show %s · reins runs events %s · reins runs artifacts %s\n", run.Id, run.Id, run.Id)
}

// describeCall is a one-line view of a tool call.
func describeCall(name, input string) string {
	var in map[string]any
	json.Unmarshal([]byte(input), &in)
	var arg string
	for _, k := range []string{"command", "cmd", "file_path", "path", "pattern", "query", "url", "question", "to"} {
		if s, ok := in[k].(string); ok {
			arg = s
			break
		}
	}
	if action, ok := in["action"].(string); ok && arg == "" {
		arg = computerArgs(action, in)
	}
	if sb, ok := in["sandbox"].(string); ok {
		name += "@" + sb
	}
	return name + "  " + summarize(arg, 1)
}

// computerArgs shows a computer call: its action and what it acts on
// ("left_click 100,200", "type hello", "zoom 0,0,640,400").
func computerArgs(action string, in map[string]any) string {
	parts := []string{action}
	for _, k := range []string{"start_coordinate", "coordinate", "region"} {
		if v, ok := in[k].([]any); ok {
			nums := make([]string, len(v))
			for i, n := range v {
				nums[i] = fmt.Sprint(n)
			}
			parts = append(parts, strings.Join(nums, ","))
		}
	}
	for _, k := range []string{"scroll_direction", "text", "duration"} {
		if v, ok := in[k]; ok {
			parts = append(parts, fmt.Sprint(v))
		}
	}
	return strings.Join(parts, " ")
}

// summarize keeps the first lines of s, each cut to a screen.
func summarize(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	more := len(parts) - lines
	if more > 0 {
		parts = parts[:lines]
	}
	for i, p := range parts {
		if len(p) > 110 {
			parts[i] = p[:110] + "…"
		}
	}
	out := strings.Join(parts, "\n    ")
	if more > 0 {
		out += fmt.Sprintf("\n    … (%d more lines)", more)
	}
	return out
}

func runsCmd() *cobra.Command {
	c := &cobra.Command{Use: "runs", Short: "List, inspect and steer runs"}
	c.AddCommand(runsLsCmd(), runsShowCmd(), runsEventsCmd(), runsCancelCmd(), runsAnswerCmd(), runsArtifactsCmd(),
		runsApproveCmd(), runsDenyCmd(), runsPauseCmd(), runsResumeCmd(), runsForkCmd(), runsReplayCmd())
	return group(c)
}

func runsLsCmd() *cobra.Command {
	var statuses []string
	var asJSON bool
	c := &cobra.Command{
		Use: "ls", Short: "List runs, newest first", Args: usageArgs(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			want, err := parseRunStatuses(statuses)
			if err != nil {
				return err
			}
			runs, err := cl.ListRuns(ctx, want)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSONList(c.OutOrStdout(), runs)
			}
			w := tabwriter.NewWriter(c.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tSTATUS\tMODEL\tSTEPS\tCOST\tCREATED\tTASK")
			for _, r := range runs {
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t$%.4f\t%s\t%s\n", r.Id, runStatusName(r.Status), runModel(r.Spec), r.Steps, r.CostUsd,
					ago(r.CreatedUnixNano), summarize(r.Spec.Task, 1))
			}
			return w.Flush()
		},
	}
	c.Flags().StringSliceVar(&statuses, "status", nil, "only runs with this status (repeatable)")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func runsShowCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use: "show ID", Short: "Show a run: status, model, sandboxes, usage, cost, answer", Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			r, err := cl.GetRun(ctx, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.OutOrStdout(), r)
			}
			w := tabwriter.NewWriter(c.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintf(w, "id\t%s\nstatus\t%s\nmodel\t%s\ntask\t%s\nsteps\t%d\n", r.Id, runStatusName(r.Status), cmp.Or(r.Spec.Model, "-"), summarize(r.Spec.Task, 3), r.Steps)
			if r.Spec.Agent != "" {
				fmt.Fprintf(w, "agent\t%s (sandbox memory %s)\n", r.Spec.Agent, humanBytes(r.Spec.MemoryBytes))
			}
			u := r.Usage
			fmt.Fprintf(w, "tokens\t%d in, %d out, %d cache read, %d cache write\ncost\t$%.4f\ncreated\t%s\n",
				u.GetInputTokens(), u.GetOutputTokens(), u.GetCacheReadTokens(), u.GetCacheWriteTokens(), r.CostUsd, ago(r.CreatedUnixNano))
			for name, sb := range r.Sandboxes {
				fmt.Fprintf(w, "sandbox\t%s = %s (%s)\n", name, sb, r.Spec.Sandboxes[name])
			}
			for name, screen := range r.Spec.GetScreens() {
				fmt.Fprintf(w, "screen\t%s %s (the computer tool; the model sees the newest %d screenshots)\n", name, screen,
					cmp.Or(int(r.Spec.GetKeepScreenshots()), runlog.DefaultKeepScreenshots))
			}
			printNetwork(w, r.Spec.GetNetwork())
			if r.Reason != "" {
				fmt.Fprintf(w, "reason\t%s\n", r.Reason)
			}
			for _, p := range r.Pending {
				fmt.Fprintf(w, "pending\t%s %s %s (rule %s: %s)\n", p.CallId, p.Tool, summarize(p.Input, 1), p.Rule, p.Reason)
			}
			w.Flush()
			if r.Text != "" {
				fmt.Fprintf(c.OutOrStdout(), "\n%s\n", r.Text)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func runsEventsCmd() *cobra.Command {
	var follow, asJSON bool
	c := &cobra.Command{
		Use: "events ID", Short: "Print a run's event log", Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			return cl.RunEvents(ctx, args[0], 0, follow, func(ev *reinsv1.RunEvent) error {
				if asJSON {
					return printJSONLine(c.OutOrStdout(), ev)
				}
				fmt.Fprintf(c.OutOrStdout(), "%4d %s %-16s %s\n", ev.Seq, time.Unix(0, ev.TimeUnixNano).Format("15:04:05.000"),
					eventName(ev.Type), summarize(eventLine(ev), 1))
				return nil
			})
		},
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing events until the run ends")
	c.Flags().BoolVar(&asJSON, "json", false, "one JSON object per line: the API's RunEvent")
	return c
}

func runsCancelCmd() *cobra.Command {
	return &cobra.Command{
		Use: "cancel ID", Short: "End a run now (kills the running tool)", Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			return cl.CancelRun(ctx, args[0])
		},
	}
}

func runsAnswerCmd() *cobra.Command {
	return &cobra.Command{
		Use: "answer ID TEXT", Short: "Answer a run waiting on ask_human", Args: usageArgs(cobra.MinimumNArgs(2)),
		RunE: func(c *cobra.Command, args []string) error {
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			return cl.AnswerRun(ctx, args[0], strings.Join(args[1:], " "))
		},
	}
}

func runsArtifactsCmd() *cobra.Command {
	var get, out string
	var asJSON bool
	c := &cobra.Command{
		Use: "artifacts ID", Short: "List a run's artifacts, or download one with --get", Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			if get != "" {
				if out == "" || out == "-" {
					return cl.DownloadArtifact(ctx, args[0], get, c.OutOrStdout())
				}
				f, err := os.Create(out)
				if err != nil {
					return err
				}
				status := newStatusLine(os.Stderr)
				defer status.Done()
				err = cl.DownloadArtifact(ctx, args[0], get, &progressWriter{w: f, status: status, label: "downloading " + get})
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					os.Remove(out) // no half file left behind
				}
				return err
			}
			arts, err := cl.Artifacts(ctx, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSONList(c.OutOrStdout(), arts)
			}
			w := tabwriter.NewWriter(c.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tSIZE\tSOURCE\tDIGEST")
			for _, a := range arts {
				digest := a.Digest
				if a.Error != "" {
					digest = "not saved: " + a.Error
				}
				fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", a.Name, a.Size, a.Source, digest)
			}
			return w.Flush()
		},
	}
	c.Flags().StringVar(&get, "get", "", "download this artifact (name or digest)")
	c.Flags().StringVarP(&out, "output", "o", "", "write the download to this file (default stdout)")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func absPath(p string) (string, error) { return filepath.Abs(p) }

// prepareImages builds (or pulls) the images a run's new sandboxes are
// made from before the run starts, showing the progress: the first use of
// desktop builds it for minutes, longer than Start waits for an image. A
// cached image answers at once. Sandboxes lent to the run, snapshots and
// templates are the service's to resolve.
func prepareImages(ctx context.Context, cl *client.Client, sandboxes map[string]string) error {
	seen := map[string]bool{}
	for _, img := range sandboxes {
		if img == "" || seen[img] || strings.HasPrefix(img, agent.AttachPrefix) ||
			strings.HasPrefix(img, runlog.SnapshotImagePrefix) || strings.HasPrefix(img, "template:") {
			continue
		}
		seen[img] = true
		bar := newStatusLine(os.Stderr)
		_, err := cl.BuildImage(ctx, img, bar.Progress)
		bar.Done()
		if err != nil && !errors.Is(err, errdefs.ErrUnimplemented) { // an older service: Start resolves it
			return err
		}
	}
	return nil
}
