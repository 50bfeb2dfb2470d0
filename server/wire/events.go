package wire

import (
	"encoding/json"
	"log/slog"
	"math"
	"time"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/policy"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/store"
)

// Event converts an event of a run's log for the wire: its type as an enum
// and its payload as the type's message. A type with no wire form, or a
// payload that does not decode, is logged and sent without a payload (the
// seq and time still tell the reader an event is there).
func Event(ev store.Event) *reinsv1.RunEvent {
	pb := &reinsv1.RunEvent{RunId: ev.RunID, Seq: ev.Seq, Type: EventType(ev.Type), TimeUnixNano: ev.Time.UnixNano()}
	set, ok := payloads[ev.Type]
	if !ok {
		slog.Warn("wire: an event type has no payload on the wire; sent without one", "run", ev.RunID, "seq", ev.Seq, "type", ev.Type)
		return pb
	}
	if err := set(pb, ev.Data); err != nil {
		slog.Warn("wire: an event's payload does not decode; sent without one", "run", ev.RunID, "seq", ev.Seq, "type", ev.Type, "err", err)
	}
	return pb
}

// payload decodes an event's JSON as T and sets the wire payload from it.
func payload[T any](set func(pb *reinsv1.RunEvent, d *T)) func(*reinsv1.RunEvent, []byte) error {
	return func(pb *reinsv1.RunEvent, data []byte) error {
		var d T
		if err := json.Unmarshal(data, &d); err != nil {
			return err
		}
		set(pb, &d)
		return nil
	}
}

var (
	sandboxPayload = payload(func(pb *reinsv1.RunEvent, d *runlog.SandboxEvent) {
		pb.Payload = &reinsv1.RunEvent_Sandbox{Sandbox: &reinsv1.SandboxEvent{Name: d.Name, Id: d.ID, Image: d.Image,
			Previous: d.Previous, Reason: d.Reason, Note: d.Note, Snapshot: d.Snapshot, From: d.From, By: d.By}}
	})
	checkpointPayload = payload(func(pb *reinsv1.RunEvent, d *runlog.Checkpoint) {
		pb.Payload = &reinsv1.RunEvent_Checkpoint{Checkpoint: &reinsv1.Checkpoint{Sandbox: d.Sandbox, Id: d.ID, Digest: d.Digest,
			Seq: d.Seq, Files: d.Files, Bytes: d.Bytes, Reason: d.Reason, Error: d.Error}}
	})
	notePayload = payload(func(pb *reinsv1.RunEvent, d *runlog.Note) {
		pb.Payload = &reinsv1.RunEvent_Note{Note: &reinsv1.Note{Message: d.Message}}
	})
	agentPayload = payload(func(pb *reinsv1.RunEvent, d *runlog.AgentProgram) {
		pb.Payload = &reinsv1.RunEvent_AgentProgram{AgentProgram: &reinsv1.AgentProgram{Sandbox: d.Sandbox, Argv: d.Argv,
			Env: d.Env, Key: d.Key, Pid: d.Pid, OomKills: int32(d.OOMKills)}}
	})
)

// GatewayCall converts the record of a call through the model gateway
// (nil stays nil).
func GatewayCall(g *runlog.GatewayCall) *reinsv1.GatewayCall {
	if g == nil {
		return nil
	}
	return &reinsv1.GatewayCall{Sandbox: g.Sandbox, Wire: g.Wire, Asked: g.Asked, Model: g.Model, Stream: g.Stream,
		Status: int32(g.Status), Error: g.Error, FirstByteMs: g.FirstMS, Messages: int32(g.Messages), Tools: int32(g.Tools),
		SystemChars: int32(g.SystemChars), New: Blocks(g.New)}
}

// GatewayCallFromProto converts a wire gateway call back.
func GatewayCallFromProto(g *reinsv1.GatewayCall) *runlog.GatewayCall {
	if g == nil {
		return nil
	}
	return &runlog.GatewayCall{Sandbox: g.Sandbox, Wire: g.Wire, Asked: g.Asked, Model: g.Model, Stream: g.Stream,
		Status: int(g.Status), Error: g.Error, FirstMS: g.FirstByteMs, Messages: int(g.Messages), Tools: int(g.Tools),
		SystemChars: int(g.SystemChars), New: BlocksFromProto(g.New)}
}

// payloads holds, for each event type, how its payload reaches the wire.
var payloads = map[string]func(*reinsv1.RunEvent, []byte) error{
	runlog.EventRunCreated: payload(func(pb *reinsv1.RunEvent, d *runlog.RunCreated) {
		pb.Payload = &reinsv1.RunEvent_RunCreated{RunCreated: &reinsv1.RunCreated{Spec: Spec(d.Spec)}}
	}),
	runlog.EventModelResponse: payload(func(pb *reinsv1.RunEvent, d *runlog.ModelResponse) {
		pb.Payload = &reinsv1.RunEvent_ModelResponse{ModelResponse: &reinsv1.ModelResponse{Step: int32(d.Step),
			Content: Blocks(d.Content), StopReason: StopReason(d.StopReason), Usage: Usage(d.Usage),
			CostUsd: d.CostUSD, DurationMs: d.DurationMS, Gateway: GatewayCall(d.Gateway)}}
	}),
	runlog.EventAgentStarting: agentPayload,
	runlog.EventAgentStarted:  agentPayload,
	runlog.EventToolCall: payload(func(pb *reinsv1.RunEvent, d *runlog.ToolCall) {
		pb.Payload = &reinsv1.RunEvent_ToolCall{ToolCall: &reinsv1.ToolCall{Step: int32(d.Step), CallId: d.CallID,
			Name: d.Name, InputJson: string(d.Input), Key: d.Key}}
	}),
	runlog.EventToolResult: payload(func(pb *reinsv1.RunEvent, d *runlog.ToolResult) {
		pb.Payload = &reinsv1.RunEvent_ToolResult{ToolResult: &reinsv1.ToolResult{Step: int32(d.Step), CallId: d.CallID,
			Name: d.Name, Text: d.Text, IsError: d.IsError, Artifact: d.Artifact, FullBytes: int64(d.FullBytes),
			Images: d.Images, ImageBytes: d.ImageBytes, DurationMs: d.DurationMS, Unknown: d.Unknown, Untrusted: d.Untrusted}}
	}),
	runlog.EventSandboxCreated:   sandboxPayload,
	runlog.EventSandboxLost:      sandboxPayload,
	runlog.EventSandboxReplaced:  sandboxPayload,
	runlog.EventSandboxSuspended: sandboxPayload,
	runlog.EventSandboxResumed:   sandboxPayload,
	runlog.EventSandboxLifecycle: sandboxPayload,
	runlog.EventTakeover:         sandboxPayload,
	runlog.EventHandback:         sandboxPayload,
	runlog.EventCheckpoint:       checkpointPayload,
	runlog.EventCheckpointFailed: checkpointPayload,
	runlog.EventWaiting: payload(func(pb *reinsv1.RunEvent, d *runlog.Waiting) {
		pb.Payload = &reinsv1.RunEvent_Waiting{Waiting: &reinsv1.Waiting{CallId: d.CallID, Question: d.Question}}
	}),
	runlog.EventHumanAnswer: payload(func(pb *reinsv1.RunEvent, d *runlog.HumanAnswer) {
		pb.Payload = &reinsv1.RunEvent_HumanAnswer{HumanAnswer: &reinsv1.HumanAnswer{CallId: d.CallID, Text: d.Text, Actor: d.Actor}}
	}),
	runlog.EventRecovered: notePayload,
	runlog.EventPaused:    notePayload,
	runlog.EventResumed:   notePayload,
	runlog.EventFinished: payload(func(pb *reinsv1.RunEvent, d *runlog.Finished) {
		pb.Payload = &reinsv1.RunEvent_Finished{Finished: &reinsv1.Finished{Status: RunStatus(d.Status), Text: d.Text,
			Reason: d.Reason, Usage: Usage(d.Usage), CostUsd: d.Cost, Steps: int32(d.Steps)}}
	}),
	runlog.EventPolicyDecision: payload(func(pb *reinsv1.RunEvent, d *runlog.PolicyDecision) {
		pb.Payload = &reinsv1.RunEvent_PolicyDecision{PolicyDecision: &reinsv1.PolicyDecision{CallId: d.CallID, Tool: d.Tool,
			Action: PolicyAction(policy.Action(d.Action)), Rule: d.Rule, Reason: d.Reason}}
	}),
	runlog.EventApprovalRequested: payload(func(pb *reinsv1.RunEvent, d *runlog.ApprovalRequested) {
		pb.Payload = &reinsv1.RunEvent_ApprovalRequested{ApprovalRequested: &reinsv1.ApprovalRequested{CallId: d.CallID,
			Tool: d.Tool, InputJson: string(d.Input), Rule: d.Rule, Reason: d.Reason}}
	}),
	runlog.EventApprovalDecided: payload(func(pb *reinsv1.RunEvent, d *runlog.ApprovalDecided) {
		pb.Payload = &reinsv1.RunEvent_ApprovalDecided{ApprovalDecided: &reinsv1.ApprovalDecided{CallId: d.CallID,
			Approved: d.Approved, Actor: d.Actor, EditedInputJson: string(d.Edited), Always: d.Always, Reason: d.Reason}}
	}),
	runlog.EventForked: payload(func(pb *reinsv1.RunEvent, d *runlog.Forked) {
		pb.Payload = &reinsv1.RunEvent_Forked{Forked: &reinsv1.Forked{From: d.From, AtSeq: d.AtSeq, Model: d.Model, Message: d.Message,
			Snapshots: d.Snapshots}}
	}),
	runlog.EventArtifact: payload(func(pb *reinsv1.RunEvent, d *runlog.Artifact) {
		pb.Payload = &reinsv1.RunEvent_Artifact{Artifact: Artifact(*d)}
	}),
	runlog.EventEgress: payload(func(pb *reinsv1.RunEvent, d *runlog.Egress) {
		e := &reinsv1.Egress{Sandbox: d.Sandbox, Id: d.ID, AfterSeq: d.AfterSeq, LastSeq: d.LastSeq,
			Omitted: int32(d.Omitted), Denied: int32(d.Denied)}
		for i, en := range d.Entries {
			e.Entries = append(e.Entries, EgressEntry(store.EgressRecord{Seq: d.AfterSeq + int64(i) + 1, Entry: en}))
		}
		pb.Payload = &reinsv1.RunEvent_Egress{Egress: e}
	}),
}

// EventPayload converts a wire event's payload back to its runlog value
// (runlog.ToolCall, runlog.Note, …), or nil when it has none.
func EventPayload(pb *reinsv1.RunEvent) any {
	switch p := pb.Payload.(type) {
	case *reinsv1.RunEvent_RunCreated:
		spec, err := SpecFromProto(p.RunCreated.Spec)
		if err != nil {
			slog.Warn("wire: a run's logged network rules do not read; shown without them", "err", err)
		}
		return runlog.RunCreated{Spec: spec}
	case *reinsv1.RunEvent_ModelResponse:
		d := p.ModelResponse
		return runlog.ModelResponse{Step: int(d.Step), Content: BlocksFromProto(d.Content), StopReason: StopReasonFromProto(d.StopReason),
			Usage: UsageFromProto(d.Usage), CostUSD: d.CostUsd, DurationMS: d.DurationMs, Gateway: GatewayCallFromProto(d.Gateway)}
	case *reinsv1.RunEvent_AgentProgram:
		d := p.AgentProgram
		return runlog.AgentProgram{Sandbox: d.Sandbox, Argv: d.Argv, Env: d.Env, Key: d.Key, Pid: d.Pid, OOMKills: int(d.OomKills)}
	case *reinsv1.RunEvent_ToolCall:
		d := p.ToolCall
		return runlog.ToolCall{Step: int(d.Step), CallID: d.CallId, Name: d.Name, Input: raw(d.InputJson), Key: d.Key}
	case *reinsv1.RunEvent_ToolResult:
		d := p.ToolResult
		return runlog.ToolResult{Step: int(d.Step), CallID: d.CallId, Name: d.Name, Text: d.Text, IsError: d.IsError,
			Artifact: d.Artifact, FullBytes: int(d.FullBytes), Images: d.Images, ImageBytes: d.ImageBytes, DurationMS: d.DurationMs,
			Unknown: d.Unknown, Untrusted: d.Untrusted}
	case *reinsv1.RunEvent_Sandbox:
		d := p.Sandbox
		return runlog.SandboxEvent{Name: d.Name, ID: d.Id, Image: d.Image, Previous: d.Previous, Reason: d.Reason, Note: d.Note,
			Snapshot: d.Snapshot, From: d.From, By: d.By}
	case *reinsv1.RunEvent_Checkpoint:
		d := p.Checkpoint
		return runlog.Checkpoint{Sandbox: d.Sandbox, ID: d.Id, Digest: d.Digest, Seq: d.Seq, Files: d.Files, Bytes: d.Bytes,
			Reason: d.Reason, Error: d.Error}
	case *reinsv1.RunEvent_Waiting:
		return runlog.Waiting{CallID: p.Waiting.CallId, Question: p.Waiting.Question}
	case *reinsv1.RunEvent_HumanAnswer:
		d := p.HumanAnswer
		return runlog.HumanAnswer{CallID: d.CallId, Text: d.Text, Actor: d.Actor}
	case *reinsv1.RunEvent_Note:
		return runlog.Note{Message: p.Note.Message}
	case *reinsv1.RunEvent_Finished:
		d := p.Finished
		return runlog.Finished{Status: RunStatusFromProto(d.Status), Text: d.Text, Reason: d.Reason,
			Usage: UsageFromProto(d.Usage), Cost: d.CostUsd, Steps: int(d.Steps)}
	case *reinsv1.RunEvent_PolicyDecision:
		d := p.PolicyDecision
		return runlog.PolicyDecision{CallID: d.CallId, Tool: d.Tool, Action: string(PolicyActionFromProto(d.Action)), Rule: d.Rule, Reason: d.Reason}
	case *reinsv1.RunEvent_ApprovalRequested:
		d := p.ApprovalRequested
		return runlog.ApprovalRequested{CallID: d.CallId, Tool: d.Tool, Input: raw(d.InputJson), Rule: d.Rule, Reason: d.Reason}
	case *reinsv1.RunEvent_ApprovalDecided:
		d := p.ApprovalDecided
		return runlog.ApprovalDecided{CallID: d.CallId, Approved: d.Approved, Actor: d.Actor, Edited: raw(d.EditedInputJson),
			Always: d.Always, Reason: d.Reason}
	case *reinsv1.RunEvent_Forked:
		d := p.Forked
		return runlog.Forked{From: d.From, AtSeq: d.AtSeq, Model: d.Model, Message: d.Message, Snapshots: d.Snapshots}
	case *reinsv1.RunEvent_Artifact:
		d := p.Artifact
		return runlog.Artifact{Name: d.Name, Digest: d.Digest, Size: d.Size, Source: d.Source, Error: d.Error}
	case *reinsv1.RunEvent_Egress:
		d := p.Egress
		out := runlog.Egress{Sandbox: d.Sandbox, ID: d.Id, AfterSeq: d.AfterSeq, LastSeq: d.LastSeq,
			Omitted: int(d.Omitted), Denied: int(d.Denied)}
		for _, en := range d.Entries {
			out.Entries = append(out.Entries, EgressEntryFromProto(en).Entry)
		}
		return out
	}
	return nil
}

func raw(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}

// Blocks converts a model's content blocks.
func Blocks(bs []model.Block) []*reinsv1.Block {
	if bs == nil {
		return nil
	}
	out := make([]*reinsv1.Block, len(bs))
	for i, b := range bs {
		out[i] = &reinsv1.Block{Type: BlockType(b.Type), Text: b.Text, ToolCallId: b.ToolCallID, ToolName: b.ToolName,
			InputJson: string(b.Input), InputError: b.InputError, IsError: b.IsError, MediaType: b.MediaType,
			Data: b.Data, Content: Blocks(b.Content)}
	}
	return out
}

// BlocksFromProto converts wire content blocks back.
func BlocksFromProto(bs []*reinsv1.Block) []model.Block {
	if bs == nil {
		return nil
	}
	out := make([]model.Block, len(bs))
	for i, b := range bs {
		out[i] = model.Block{Type: BlockTypeFromProto(b.Type), Text: b.Text, ToolCallID: b.ToolCallId, ToolName: b.ToolName,
			Input: raw(b.InputJson), InputError: b.InputError, IsError: b.IsError, MediaType: b.MediaType,
			Data: b.Data, Content: BlocksFromProto(b.Content)}
	}
	return out
}

// Usage converts what model calls consumed.
func Usage(u model.Usage) *reinsv1.Usage {
	return &reinsv1.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheReadTokens: u.CacheReadTokens, CacheWriteTokens: u.CacheWriteTokens}
}

// UsageFromProto converts a wire usage back.
func UsageFromProto(u *reinsv1.Usage) model.Usage {
	return model.Usage{InputTokens: u.GetInputTokens(), OutputTokens: u.GetOutputTokens(),
		CacheReadTokens: u.GetCacheReadTokens(), CacheWriteTokens: u.GetCacheWriteTokens()}
}

// Spec converts a run's spec for the wire.
func Spec(s runlog.Spec) *reinsv1.RunSpec {
	p := &reinsv1.RunSpec{Task: s.Task, Model: s.Model, System: s.System, Sandboxes: s.Sandboxes,
		MaxSteps: int32(s.MaxSteps), MaxCostUsd: s.MaxCost, MaxTokens: s.MaxTokens,
		TimeoutMs: time.Duration(s.Timeout).Milliseconds(), Tools: s.Tools, Policy: s.Policy, Script: s.Script,
		Network: Network(s.Network), Agent: s.Agent, MemoryBytes: s.Memory,
		KeepScreenshots: int32(min(s.KeepScreenshots, math.MaxInt32)), Screens: s.Screens,
		UploadsDigest: s.UploadsDigest, Downloads: s.Downloads}
	for _, u := range s.Uploads {
		p.Uploads = append(p.Uploads, &reinsv1.RunUpload{Path: u.Path, Size: u.Size, Dir: u.Dir})
	}
	if s.CheckpointEvery != nil {
		n := int32(min(*s.CheckpointEvery, math.MaxInt32))
		p.CheckpointEvery = &n
	}
	return p
}

// SpecFromProto converts a wire run spec (nil is the empty spec). Network
// rules that do not parse are NetworkFromProto's error, returned with the
// rest of the spec (and no rules).
func SpecFromProto(p *reinsv1.RunSpec) (runlog.Spec, error) {
	if p == nil {
		p = &reinsv1.RunSpec{}
	}
	network, err := NetworkFromProto(p.Network)
	s := runlog.Spec{Task: p.Task, Model: p.Model, System: p.System, Sandboxes: p.Sandboxes,
		MaxSteps: int(p.MaxSteps), MaxCost: p.MaxCostUsd, MaxTokens: p.MaxTokens,
		Timeout: runlog.Duration(time.Duration(p.TimeoutMs) * time.Millisecond), Tools: p.Tools, Policy: p.Policy,
		Script: p.Script, Network: network, Agent: p.Agent, Memory: p.MemoryBytes,
		KeepScreenshots: int(p.KeepScreenshots), Screens: p.Screens, Downloads: p.Downloads, UploadsDigest: p.UploadsDigest}
	for _, u := range p.Uploads {
		s.Uploads = append(s.Uploads, runlog.Upload{Path: u.Path, Size: u.Size, Dir: u.Dir})
	}
	if p.CheckpointEvery != nil {
		n := int(*p.CheckpointEvery)
		s.CheckpointEvery = &n
	}
	return s, err
}

// Artifact converts an artifact's description.
func Artifact(a runlog.Artifact) *reinsv1.Artifact {
	return &reinsv1.Artifact{Name: a.Name, Digest: a.Digest, Size: a.Size, Source: a.Source, Error: a.Error}
}
