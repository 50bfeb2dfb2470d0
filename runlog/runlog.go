// Package runlog is the vocabulary of a run's log: the spec that opens a
// run, its statuses, and each event's type and payload, as the loop writes
// them and the service, the CLI and other readers decode them. It imports
// nothing of reins but the model and egress vocabularies and errdefs.
package runlog

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/model"
)

// Status is where a run is. Terminal statuses never change again.
//
//	queued ──▶ running ──▶ succeeded | failed | cancelled
//	             │  ▲
//	             ▼  │
//	     waiting_approval (ask_human, approvals), paused
type Status string

const (
	StatusQueued          Status = "queued"
	StatusRunning         Status = "running"
	StatusWaitingApproval Status = "waiting_approval"
	StatusPaused          Status = "paused"
	StatusSucceeded       Status = "succeeded"
	StatusFailed          Status = "failed"
	StatusCancelled       Status = "cancelled"
)

// Terminal reports whether s is final.
func (s Status) Terminal() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusCancelled
}

// Spec is what a user asks a run to do.
type Spec struct {
	Task   string `json:"task"`
	Model  string `json:"model"` // provider:name, e.g. anthropic:claude-sonnet-4-5, script:./x.json
	System string `json:"system,omitempty"`
	// Sandboxes names the run's sandboxes and their images; a run with
	// one sandbox calls it "default". They are created on first use.
	Sandboxes map[string]string `json:"sandboxes,omitempty"`
	MaxSteps  int               `json:"max_steps,omitempty"`
	MaxCost   float64           `json:"max_cost_usd,omitempty"`
	MaxTokens int64             `json:"max_tokens,omitempty"`
	Timeout   Duration          `json:"timeout,omitempty"`
	// Tools limits the run to these tools (default: every tool configured).
	Tools []string `json:"tools,omitempty"`
	// Policy is the run's policy document (YAML or JSON), as given.
	Policy string `json:"policy,omitempty"`
	// Script is the JSON of a script: model, sent inline (the CLI reads
	// the file Model names); Model's name then only labels it.
	Script string `json:"script,omitempty"`
	// Agent, when set, makes the run an agent program's inside its
	// sandbox instead of reins' own loop: "claude-code", "codex" or
	// "cmd:PROGRAM ARGS". The program calls models through the gateway,
	// which records each call in this run's log and holds it to the
	// run's budgets (MaxSteps counts model calls); the run ends when the
	// program exits.
	Agent string `json:"agent,omitempty"`
	// Memory is the memory limit of the sandbox an agent run creates, in
	// bytes (0: DefaultAgentMemory).
	Memory int64 `json:"memory,omitempty"`
	// Network is the rules of every sandbox the run creates (the zero
	// value: egress mode, nothing allowed); a sandbox it attaches to
	// keeps its own. The API normalizes them before the run starts.
	Network egress.Rules `json:"network,omitzero"`
	// CheckpointEvery is how many mutating tool calls (bash, write_file, edit_file: the sandbox tools
	// labelled destructive) of a
	// sandbox the run makes between checkpoints of its workspace; 0 takes
	// none (a suspend's saved workspace is still recorded). Nil, in a log
	// written before checkpoints, is DefaultCheckpointEvery; Normalize
	// sets it.
	CheckpointEvery *int `json:"checkpoint_every,omitempty"`
	// KeepScreenshots is how many of the newest screenshots the model is
	// shown with each call (0: DefaultKeepScreenshots); older ones are
	// replaced by a line saying so. They stay in the log and the blob
	// store, by digest.
	KeepScreenshots int `json:"keep_screenshots,omitempty"`
	// Screens names the run's sandbox that has a display, and its size
	// ("default": "1280x800"). The engine fills it when the run starts,
	// from the images (a spec sent to it has none), so that a replay or
	// a fork is offered the same tools; the computer tool is offered when
	// it is not empty. A run has at most one screen.
	Screens map[string]string `json:"screens,omitempty"`
	// Uploads are what the run's files sandbox (FilesSandbox) gets
	// before its first tool call, from the tar archive UploadsDigest, and
	// what the model's first message lists. The service fills both from
	// the archive a client sends with the run (docs/api.md, "Run files").
	Uploads       []Upload `json:"uploads,omitempty"`
	UploadsDigest string   `json:"uploads_digest,omitempty"`
	// Downloads are absolute paths or globs in the files sandbox whose
	// regular files are saved as artifacts, named by their paths, when
	// the run ends, however it ends.
	Downloads []string `json:"downloads,omitempty"`
}

// Upload is one file or directory of a run's uploads.
type Upload struct {
	Path string `json:"path"` // absolute, inside the sandbox
	Size int64  `json:"size,omitempty"`
	Dir  bool   `json:"dir,omitempty"`
}

// Bounds of a run's files (docs/decisions/0050-runfiles-design.md).
const (
	MaxUploadBytes    = 12 << 20  // the tar archive, inline in the start call
	MaxUploadEntries  = 10000     // files and directories in it
	MaxDownloadGlobs  = 32        // patterns in Downloads
	MaxDownloadFiles  = 1000      // files saved at the end
	MaxDownloadFile   = 256 << 20 // bytes of one file (save_artifact's bound)
	MaxDownloadTotal  = 1 << 30   // bytes of all of them
	maxDownloadGlobSz = 4096
)

// FilesSandbox is the sandbox a run's uploads go into and its downloads
// come from: its only one, else the one called "default".
func (s Spec) FilesSandbox() string {
	if len(s.Sandboxes) == 1 {
		for n := range s.Sandboxes {
			return n
		}
	}
	return DefaultSandbox
}

func (s *Spec) normalizeFiles() error {
	if len(s.Downloads) > MaxDownloadGlobs {
		return fmt.Errorf("%d downloads: a run takes at most %d paths or globs: %w", len(s.Downloads), MaxDownloadGlobs, errdefs.ErrInvalidArgument)
	}
	for _, d := range s.Downloads {
		if !strings.HasPrefix(d, "/") || len(d) > maxDownloadGlobSz || strings.ContainsAny(d, "\x00\n") {
			return fmt.Errorf("download %q: give an absolute path or glob inside the sandbox, e.g. /workspace/*.md: %w", d, errdefs.ErrInvalidArgument)
		}
	}
	if (len(s.Uploads) > 0 || len(s.Downloads) > 0) && s.Agent != "" {
		return fmt.Errorf("uploads and downloads are for reins' own loop, not yet for agent programs (--agent): copy files with reins sandbox cp: %w", errdefs.ErrInvalidArgument)
	}
	if len(s.Uploads) > 0 || len(s.Downloads) > 0 {
		if _, ok := s.Sandboxes[s.FilesSandbox()]; !ok {
			return fmt.Errorf("uploads and downloads go to the sandbox %q, which this run lacks: name one of its sandboxes so: %w", DefaultSandbox, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// DefaultKeepScreenshots is how many screenshots a model is shown when
// the spec says nothing; MaxKeepScreenshots bounds what it may say.
const (
	DefaultKeepScreenshots = 3
	MaxKeepScreenshots     = 50
)

// Screenshots is how many of the newest screenshots the model is shown.
func (s Spec) Screenshots() int {
	if s.KeepScreenshots <= 0 {
		return DefaultKeepScreenshots
	}
	return s.KeepScreenshots
}

// Checkpoints is the number of mutating calls between checkpoints (0:
// none).
func (s Spec) Checkpoints() int {
	if s.CheckpointEvery == nil {
		return DefaultCheckpointEvery
	}
	return *s.CheckpointEvery
}

// Duration is a time.Duration that reads and writes as "30s" in JSON.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

// Defaults of a Spec.
const (
	DefaultMaxSteps = 50
	DefaultSandbox  = "default"
	DefaultImage    = "busybox"
	DefaultTimeout  = time.Hour
	// DefaultAgentMemory is the memory limit of the sandbox an agent run
	// (Spec.Agent) creates: Claude Code alone takes about 400 MB, and a
	// Node program's V8 heap dies at half the sandbox's memory.
	DefaultAgentMemory = 2 << 30
	// DefaultAgentImage is the image of an agent run of claude-code or
	// codex: debian with both programs.
	DefaultAgentImage = "agents"
	// DefaultAgentMaxSteps is an agent run's most model calls: a program
	// makes several per turn of its own (titles, summaries, tools).
	DefaultAgentMaxSteps = 500
	// DefaultCheckpointEvery is how many mutating tool calls a run makes
	// between checkpoints of a sandbox's workspace.
	DefaultCheckpointEvery = 10
	// MaxCheckpointEvery bounds Spec.CheckpointEvery.
	MaxCheckpointEvery = 1_000_000
)

// The agent programs a run can start (Spec.Agent), besides
// AgentCmdPrefix+"PROGRAM ARGS".
const (
	AgentClaudeCode = "claude-code"
	AgentCodex      = "codex"
	AgentCmdPrefix  = "cmd:"
	// AgentSandbox marks a sandbox's own record: the run that keeps the
	// model calls made from a sandbox no agent run is working in. The
	// service makes it; a user cannot ask for one.
	AgentSandbox = "sandbox"
)

// Normalize fills a spec's defaults and checks it.
func (s *Spec) Normalize() error {
	s.Task = strings.TrimSpace(s.Task)
	if s.Task == "" {
		return fmt.Errorf("the run has no task: give one, e.g. reins run \"fix the failing test\": %w", errdefs.ErrInvalidArgument)
	}
	if err := s.normalizeAgent(); err != nil {
		return err
	}
	if s.Model == "" && s.Agent == "" {
		return fmt.Errorf("no model: pass --model anthropic:MODEL, openai:MODEL or script:PATH: %w", errdefs.ErrInvalidArgument)
	}
	if s.Script != "" && !strings.HasPrefix(s.Model, "script:") {
		return fmt.Errorf("the run has a script but its model is %q: a script is for a script:NAME model: %w", s.Model, errdefs.ErrInvalidArgument)
	}
	if len(s.Sandboxes) == 0 {
		s.Sandboxes = map[string]string{DefaultSandbox: DefaultImage}
		if s.Agent == AgentClaudeCode || s.Agent == AgentCodex {
			s.Sandboxes[DefaultSandbox] = DefaultAgentImage
		}
	}
	for name, img := range s.Sandboxes {
		if name == "" || strings.ContainsAny(name, " =/:") {
			return fmt.Errorf("sandbox name %q: use letters, digits, - and _: %w", name, errdefs.ErrInvalidArgument)
		}
		if img == "" {
			s.Sandboxes[name] = DefaultImage
		}
	}
	if s.MaxSteps <= 0 {
		s.MaxSteps = DefaultMaxSteps
		if s.Agent != "" {
			s.MaxSteps = DefaultAgentMaxSteps
		}
	}
	if s.Timeout <= 0 {
		s.Timeout = Duration(DefaultTimeout)
	}
	if s.CheckpointEvery == nil {
		n := DefaultCheckpointEvery
		s.CheckpointEvery = &n
	}
	if err := s.normalizeFiles(); err != nil {
		return err
	}
	if n := *s.CheckpointEvery; n < 0 || n > MaxCheckpointEvery {
		return fmt.Errorf("--checkpoint-every %d: give a number of mutating tool calls from 1 to %d, or 0 for no checkpoints: %w",
			n, MaxCheckpointEvery, errdefs.ErrInvalidArgument)
	}
	if s.MaxCost < 0 || s.MaxTokens < 0 {
		return fmt.Errorf("budgets must not be negative: %w", errdefs.ErrInvalidArgument)
	}
	if s.KeepScreenshots < 0 || s.KeepScreenshots > MaxKeepScreenshots {
		return fmt.Errorf("--keep-screenshots %d: give a number from 1 to %d (0: the default, %d): %w",
			s.KeepScreenshots, MaxKeepScreenshots, DefaultKeepScreenshots, errdefs.ErrInvalidArgument)
	}
	return nil
}

// normalizeAgent checks an agent run's own fields: a known program, one
// sandbox, a memory limit (the default when none).
func (s *Spec) normalizeAgent() error {
	if s.Agent == "" {
		if s.Memory != 0 {
			return fmt.Errorf("--memory is for agent runs (--agent): %w", errdefs.ErrInvalidArgument)
		}
		return nil
	}
	s.Agent = strings.TrimSpace(s.Agent)
	switch {
	case s.Agent == AgentClaudeCode, s.Agent == AgentCodex, s.Agent == AgentSandbox:
	case strings.HasPrefix(s.Agent, AgentCmdPrefix) && strings.TrimSpace(strings.TrimPrefix(s.Agent, AgentCmdPrefix)) != "":
	default:
		return fmt.Errorf("unknown agent %q: use claude-code, codex or cmd:\"PROGRAM ARGS\": %w", s.Agent, errdefs.ErrInvalidArgument)
	}
	if len(s.Sandboxes) > 1 {
		return fmt.Errorf("an agent run works in one sandbox; this one names %d: %w", len(s.Sandboxes), errdefs.ErrInvalidArgument)
	}
	if s.Memory < 0 {
		return fmt.Errorf("--memory must not be negative: %w", errdefs.ErrInvalidArgument)
	}
	if s.Memory == 0 {
		s.Memory = DefaultAgentMemory
	}
	if len(s.Tools) > 0 || strings.TrimSpace(s.Policy) != "" {
		return fmt.Errorf("an agent run uses its program's own tools: --tools and --policy are for reins' loop: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

// Event types of a run's log.
const (
	EventRunCreated      = "run_created"      // RunCreated
	EventModelResponse   = "model_response"   // ModelResponse
	EventToolCall        = "tool_call"        // ToolCall: the intent, before the call
	EventToolResult      = "tool_result"      // ToolResult: after it
	EventSandboxCreated  = "sandbox_created"  // SandboxEvent
	EventSandboxLost     = "sandbox_lost"     // SandboxEvent
	EventSandboxReplaced = "sandbox_replaced" // SandboxEvent
	EventWaiting         = "waiting"          // Waiting: parked for a person
	EventHumanAnswer     = "human_answer"     // HumanAnswer
	EventRecovered       = "recovered"        // Note: the service restarted mid-run
	EventFinished        = "finished"         // Finished: the last event of a run
	// An agent run's program (Spec.Agent): the intent, logged before it
	// is started, and its pid once it runs.
	EventAgentStarting = "agent_starting" // AgentProgram
	EventAgentStarted  = "agent_started"  // AgentProgram, with Pid
)

// AgentProgram is an agent run's program in its sandbox. Env names the
// variables it was given (their values, the gateway's token among them,
// are not logged).
type AgentProgram struct {
	Sandbox string   `json:"sandbox"` // the sandbox's id
	Argv    []string `json:"argv"`
	Env     []string `json:"env,omitempty"`
	Key     string   `json:"key"` // idempotency key of the start
	Pid     int32    `json:"pid,omitempty"`
	// OOMKills is how many of the sandbox's processes its memory limit
	// had killed before the program started.
	OOMKills int `json:"oom_kills,omitempty"`
}

// RunCreated opens a run's log.
type RunCreated struct {
	Spec Spec `json:"spec"`
}

// ModelResponse is one answer of the model.
type ModelResponse struct {
	Step       int              `json:"step"`
	Content    []model.Block    `json:"content"`
	StopReason model.StopReason `json:"stop_reason"`
	Usage      model.Usage      `json:"usage"`
	CostUSD    float64          `json:"cost_usd"`
	DurationMS int64            `json:"duration_ms"`
	// Gateway is set on a call an agent program made through the model
	// gateway (a run with an Agent, or a sandbox's own record); Step then
	// counts those calls from 1.
	Gateway *GatewayCall `json:"gateway,omitempty"`
}

// GatewayCall is what a run's log keeps of one model call made through
// the gateway: the request in summary (its size, and what is new in it
// since the model last spoke: tool results, a person's message), so that
// the log reads as a conversation without holding each request whole.
type GatewayCall struct {
	Sandbox string `json:"sandbox"`          // the sandbox's id
	Wire    string `json:"wire"`             // gateway.Wire: anthropic, openai_chat, openai_responses
	Asked   string `json:"asked"`            // the model the program asked for
	Model   string `json:"model"`            // the model that answered (provider:name)
	Stream  bool   `json:"stream,omitempty"` //
	Status  int    `json:"status"`           // the HTTP status the program got
	Error   string `json:"error,omitempty"`  // when Status is not 2xx
	FirstMS int64  `json:"first_byte_ms"`    // to the first byte sent back
	// The request: its number of messages and tools, its system prompt's
	// length, and the blocks of its last message when that is the user's.
	Messages    int           `json:"messages"`
	Tools       int           `json:"tools"`
	SystemChars int           `json:"system_chars,omitempty"`
	New         []model.Block `json:"new,omitempty"`
}

// ToolCall is the intent to call a tool, logged before the call.
type ToolCall struct {
	Step   int             `json:"step"`
	CallID string          `json:"call_id"`
	Name   string          `json:"name"`
	Input  json.RawMessage `json:"input"`
	Key    string          `json:"key"` // idempotency key: run/step/call
}

// ToolResult is what a call returned, logged after it.
type ToolResult struct {
	Step    int    `json:"step"`
	CallID  string `json:"call_id"`
	Name    string `json:"name"`
	Text    string `json:"text"` // what the model sees (maybe cut: head and tail)
	IsError bool   `json:"is_error,omitempty"`
	// Artifact is the blob digest holding the whole output when Text is
	// cut, or a screenshot.
	Artifact  string   `json:"artifact,omitempty"`
	FullBytes int      `json:"full_bytes,omitempty"`
	Images    []string `json:"images,omitempty"` // blob digests of PNGs
	// ImageBytes is the size of each of Images (absent in a log written
	// before it was recorded).
	ImageBytes []int64 `json:"image_bytes,omitempty"`
	DurationMS int64   `json:"duration_ms"`
	// Unknown marks a call whose outcome could not be learned after a
	// crash; it was not run again.
	Unknown bool `json:"unknown,omitempty"`
	// Untrusted marks a result that may carry text an attacker wrote
	// (any sandbox tool, reads_untrusted tools): the trifecta rule reads it.
	Untrusted bool `json:"untrusted,omitempty"`
}

// SandboxEvent records a run's sandbox coming, going or being replaced.
type SandboxEvent struct {
	Name     string `json:"name"`
	ID       string `json:"id"`
	Image    string `json:"image,omitempty"`
	Previous string `json:"previous,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Note     string `json:"note,omitempty"`
	// Snapshot is the digest of the saved workspace the sandbox started
	// from (created for a fork, replaced, resumed) or was saved to
	// (suspended); "" when it started from its image or reused a disk.
	Snapshot string `json:"snapshot,omitempty"`
	// From says where a created or replaced sandbox's files came from:
	// FromImage, FromSnapshot (Snapshot), FromDisk (the lost sandbox's
	// disk); "" in a log written before it was recorded.
	From string `json:"from,omitempty"`
	// By is who holds the screen (takeover, handback).
	By string `json:"by,omitempty"`
}

// Where a sandbox's files came from (SandboxEvent.From).
const (
	FromImage    = "image"
	FromSnapshot = "snapshot"
	FromDisk     = "disk"
)

// Checkpoint records a saved workspace of one of a run's sandboxes,
// appended once the snapshot is durable: the sandbox's files as they were
// after event Seq. A replacement restores the newest; a fork at a seq
// restores the newest whose Seq is at most it.
type Checkpoint struct {
	Sandbox string `json:"sandbox"` // the run's name for it
	ID      string `json:"id"`
	Digest  string `json:"digest"` // the snapshot, snapshot:DIGEST as an image
	Seq     int64  `json:"seq"`
	Files   int64  `json:"files,omitempty"`
	Bytes   int64  `json:"bytes,omitempty"`
	// Reason says what took it: CheckpointEvery calls, a park, a suspend.
	Reason string `json:"reason"`
	// Error, on a checkpoint_failed event, says why none was taken (the
	// run goes on; the next try is after CheckpointEvery more calls).
	Error string `json:"error,omitempty"`
}

// SnapshotImagePrefix before a checkpoint's digest is the image of a
// sandbox made from it (the tenant's own snapshot records only).
const SnapshotImagePrefix = "snapshot:"

// Waiting parks a run for a person.
type Waiting struct {
	CallID   string `json:"call_id"`
	Question string `json:"question"`
}

// HumanAnswer answers a Waiting.
type HumanAnswer struct {
	CallID string `json:"call_id"`
	Text   string `json:"text"`
	Actor  string `json:"actor,omitempty"`
}

// Note is an event whose only content is a message.
type Note struct {
	Message string `json:"message"`
}

// Finished closes a run's log.
type Finished struct {
	Status Status      `json:"status"`
	Text   string      `json:"text,omitempty"` // the final answer
	Reason string      `json:"reason,omitempty"`
	Usage  model.Usage `json:"usage"`
	Cost   float64     `json:"cost_usd"`
	Steps  int         `json:"steps"`
}

// Summary is kept on the run's row for listings; the log stays the truth.
type Summary struct {
	Model   string            `json:"model"`
	Task    string            `json:"task"`
	Steps   int               `json:"steps"`
	Usage   model.Usage       `json:"usage"`
	Cost    float64           `json:"cost_usd"`
	Text    string            `json:"text,omitempty"`
	Reason  string            `json:"reason,omitempty"`
	Sandbox map[string]string `json:"sandboxes,omitempty"` // name → id
	Started time.Time         `json:"started"`
}

// Events of steering: approvals, pause and resume, forks.
const (
	EventPolicyDecision    = "policy_decision"    // PolicyDecision, before each call
	EventApprovalRequested = "approval_requested" // ApprovalRequested: the run parks
	EventApprovalDecided   = "approval_decided"   // ApprovalDecided
	EventPaused            = "paused"             // Note
	EventResumed           = "resumed"            // Note
	EventForked            = "forked"             // Forked: the first event after a fork's copied history
	EventSandboxSuspended  = "sandbox_suspended"  // SandboxEvent: compute released while the run waits
	EventSandboxResumed    = "sandbox_resumed"    // SandboxEvent: started again on the same files
	EventEgress            = "egress"             // Egress: connections a run's sandbox made or was refused
	EventCheckpoint        = "checkpoint"         // Checkpoint: a sandbox's workspace saved
	EventCheckpointFailed  = "checkpoint_failed"  // Checkpoint with Error: none was taken; the run goes on
	EventSandboxLifecycle  = "sandbox_lifecycle"  // SandboxEvent: what befell a run's sandbox apart from the run (expiring, suspended for its TTL)
	EventTakeover          = "takeover"           // SandboxEvent with By: a person holds the sandbox's screen; the run's computer calls wait
	EventHandback          = "handback"           // SandboxEvent with By: the screen was handed back; the run goes on
)

// Egress records the connections one of a run's sandboxes made, or was
// refused, since the last such event (its egress log's entries after
// AfterSeq up to LastSeq), appended after the tool call in which they
// happened. Omitted counts entries past the most an event carries; the
// sandbox's egress log has them all.
type Egress struct {
	Sandbox  string         `json:"sandbox"` // the run's name for it
	ID       string         `json:"id"`
	AfterSeq int64          `json:"after_seq"`
	LastSeq  int64          `json:"last_seq"`
	Entries  []egress.Entry `json:"entries"`
	Omitted  int            `json:"omitted,omitempty"`
	Denied   int            `json:"denied,omitempty"` // of all, omitted ones included
}

// PolicyDecision records what the policy said of a call, and which rule.
type PolicyDecision struct {
	CallID string `json:"call_id"`
	Tool   string `json:"tool"`
	Action string `json:"action"` // a policy.Action: allow, deny, ask
	Rule   string `json:"rule"`
	Reason string `json:"reason"`
}

// ApprovalRequested parks a run until a person decides a call.
type ApprovalRequested struct {
	CallID string          `json:"call_id"`
	Tool   string          `json:"tool"`
	Input  json.RawMessage `json:"input"`
	Rule   string          `json:"rule"`
	Reason string          `json:"reason"`
}

// ApprovalDecided is a person's decision on a call.
type ApprovalDecided struct {
	CallID   string          `json:"call_id"`
	Approved bool            `json:"approved"`
	Actor    string          `json:"actor"`
	Edited   json.RawMessage `json:"edited_input,omitempty"` // arguments the person changed
	Always   bool            `json:"always,omitempty"`       // approve this tool for the rest of the run
	Reason   string          `json:"reason,omitempty"`       // a denial's reason, given to the model
}

// Forked opens a fork's own history.
type Forked struct {
	From    string `json:"from"`
	AtSeq   int64  `json:"at_seq"`
	Model   string `json:"model,omitempty"`
	Message string `json:"message"`
	// Snapshots names, per sandbox of the run, the checkpoint its first
	// sandbox is made from (the newest taken at or before AtSeq); a
	// sandbox not named starts from its image.
	Snapshots map[string]string `json:"snapshots,omitempty"`
}

// policyFor parses a run's policy against the engine's tools, over its
// tenant's default policy.

// Artifact is a file a run saved out of a sandbox (or a large output).
type Artifact struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
	Source string `json:"source,omitempty"` // sandbox:path it came from
	// Error says why a file the run's downloads named was not saved
	// (Digest is then empty).
	Error string `json:"error,omitempty"`
}

// EventArtifact records an artifact (Artifact).
const EventArtifact = "artifact"
