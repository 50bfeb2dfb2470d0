// Package wire converts between reins' Go vocabulary (runlog, sandbox,
// model, policy) and the reins.v1 wire types: each status, reason and kind
// to its proto enum and back, and each event of a run's log to its typed
// payload. It is the one place these conversions live; the server and the
// CLI call it.
//
// A Go value with no enum value (a constant added without one) becomes the
// enum's UNSPECIFIED and is logged, never a panic; the tests walk every Go
// constant so that such a value fails them first.
package wire

import (
	"log/slog"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/image"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/policy"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/sandbox"
)

// enum is one Go string type's table of proto enum values.
type enum[G ~string, P ~int32] struct {
	name string
	toP  map[G]P
	toG  map[P]G
}

func newEnum[G ~string, P ~int32](name string, pairs map[G]P) enum[G, P] {
	e := enum[G, P]{name: name, toP: pairs, toG: make(map[P]G, len(pairs))}
	for g, p := range pairs {
		e.toG[p] = g
	}
	return e
}

// proto maps g; the empty value is UNSPECIFIED quietly, an unknown one
// loudly.
func (e enum[G, P]) proto(g G) P {
	p, ok := e.toP[g]
	if !ok && g != "" {
		slog.Warn("wire: a value has no enum value on the wire; sent as unspecified", "enum", e.name, "value", string(g))
	}
	return p
}

// fromProto maps p back; UNSPECIFIED and values this build does not know
// are "".
func (e enum[G, P]) fromProto(p P) G { return e.toG[p] }

var (
	runStatuses = newEnum("RunStatus", map[runlog.Status]reinsv1.RunStatus{
		runlog.StatusQueued:          reinsv1.RunStatus_RUN_STATUS_QUEUED,
		runlog.StatusRunning:         reinsv1.RunStatus_RUN_STATUS_RUNNING,
		runlog.StatusWaitingApproval: reinsv1.RunStatus_RUN_STATUS_WAITING_APPROVAL,
		runlog.StatusPaused:          reinsv1.RunStatus_RUN_STATUS_PAUSED,
		runlog.StatusSucceeded:       reinsv1.RunStatus_RUN_STATUS_SUCCEEDED,
		runlog.StatusFailed:          reinsv1.RunStatus_RUN_STATUS_FAILED,
		runlog.StatusCancelled:       reinsv1.RunStatus_RUN_STATUS_CANCELLED,
	})
	sandboxStates = newEnum("SandboxState", map[sandbox.State]reinsv1.SandboxState{
		sandbox.StateCreating:  reinsv1.SandboxState_SANDBOX_STATE_CREATING,
		sandbox.StateRunning:   reinsv1.SandboxState_SANDBOX_STATE_RUNNING,
		sandbox.StatePaused:    reinsv1.SandboxState_SANDBOX_STATE_PAUSED,
		sandbox.StateSuspended: reinsv1.SandboxState_SANDBOX_STATE_SUSPENDED,
		sandbox.StateStopped:   reinsv1.SandboxState_SANDBOX_STATE_STOPPED,
	})
	sandboxReasons = newEnum("SandboxReason", map[sandbox.Reason]reinsv1.SandboxReason{
		sandbox.ReasonExited:      reinsv1.SandboxReason_SANDBOX_REASON_EXITED,
		sandbox.ReasonOOMKilled:   reinsv1.SandboxReason_SANDBOX_REASON_OOM_KILLED,
		sandbox.ReasonTTLExpired:  reinsv1.SandboxReason_SANDBOX_REASON_TTL_EXPIRED,
		sandbox.ReasonIdleTimeout: reinsv1.SandboxReason_SANDBOX_REASON_IDLE_TIMEOUT,
		sandbox.ReasonKilled:      reinsv1.SandboxReason_SANDBOX_REASON_KILLED,
		sandbox.ReasonLost:        reinsv1.SandboxReason_SANDBOX_REASON_LOST,
		sandbox.ReasonError:       reinsv1.SandboxReason_SANDBOX_REASON_ERROR,
	})
	progressPhases = newEnum("ProgressPhase", map[string]reinsv1.ProgressPhase{
		image.PhasePull:   reinsv1.ProgressPhase_PROGRESS_PHASE_PULL,
		image.PhaseUnpack: reinsv1.ProgressPhase_PROGRESS_PHASE_UNPACK,
		image.PhaseBuild:  reinsv1.ProgressPhase_PROGRESS_PHASE_BUILD,
		sandbox.PhaseBoot: reinsv1.ProgressPhase_PROGRESS_PHASE_BOOT,
	})
	eventTypes = newEnum("EventType", map[string]reinsv1.EventType{
		runlog.EventRunCreated:        reinsv1.EventType_EVENT_TYPE_RUN_CREATED,
		runlog.EventModelResponse:     reinsv1.EventType_EVENT_TYPE_MODEL_RESPONSE,
		runlog.EventToolCall:          reinsv1.EventType_EVENT_TYPE_TOOL_CALL,
		runlog.EventToolResult:        reinsv1.EventType_EVENT_TYPE_TOOL_RESULT,
		runlog.EventSandboxCreated:    reinsv1.EventType_EVENT_TYPE_SANDBOX_CREATED,
		runlog.EventSandboxLost:       reinsv1.EventType_EVENT_TYPE_SANDBOX_LOST,
		runlog.EventSandboxReplaced:   reinsv1.EventType_EVENT_TYPE_SANDBOX_REPLACED,
		runlog.EventWaiting:           reinsv1.EventType_EVENT_TYPE_WAITING,
		runlog.EventHumanAnswer:       reinsv1.EventType_EVENT_TYPE_HUMAN_ANSWER,
		runlog.EventRecovered:         reinsv1.EventType_EVENT_TYPE_RECOVERED,
		runlog.EventFinished:          reinsv1.EventType_EVENT_TYPE_FINISHED,
		runlog.EventPolicyDecision:    reinsv1.EventType_EVENT_TYPE_POLICY_DECISION,
		runlog.EventApprovalRequested: reinsv1.EventType_EVENT_TYPE_APPROVAL_REQUESTED,
		runlog.EventApprovalDecided:   reinsv1.EventType_EVENT_TYPE_APPROVAL_DECIDED,
		runlog.EventPaused:            reinsv1.EventType_EVENT_TYPE_PAUSED,
		runlog.EventResumed:           reinsv1.EventType_EVENT_TYPE_RESUMED,
		runlog.EventForked:            reinsv1.EventType_EVENT_TYPE_FORKED,
		runlog.EventSandboxSuspended:  reinsv1.EventType_EVENT_TYPE_SANDBOX_SUSPENDED,
		runlog.EventSandboxResumed:    reinsv1.EventType_EVENT_TYPE_SANDBOX_RESUMED,
		runlog.EventArtifact:          reinsv1.EventType_EVENT_TYPE_ARTIFACT,
		runlog.EventEgress:            reinsv1.EventType_EVENT_TYPE_EGRESS,
		runlog.EventCheckpoint:        reinsv1.EventType_EVENT_TYPE_CHECKPOINT,
		runlog.EventCheckpointFailed:  reinsv1.EventType_EVENT_TYPE_CHECKPOINT_FAILED,
		runlog.EventSandboxLifecycle:  reinsv1.EventType_EVENT_TYPE_SANDBOX_LIFECYCLE,
		runlog.EventTakeover:          reinsv1.EventType_EVENT_TYPE_TAKEOVER,
		runlog.EventHandback:          reinsv1.EventType_EVENT_TYPE_HANDBACK,
		runlog.EventAgentStarting:     reinsv1.EventType_EVENT_TYPE_AGENT_STARTING,
		runlog.EventAgentStarted:      reinsv1.EventType_EVENT_TYPE_AGENT_STARTED,
	})
	stopReasons = newEnum("StopReason", map[model.StopReason]reinsv1.StopReason{
		model.StopEndTurn:   reinsv1.StopReason_STOP_REASON_END_TURN,
		model.StopToolUse:   reinsv1.StopReason_STOP_REASON_TOOL_USE,
		model.StopMaxTokens: reinsv1.StopReason_STOP_REASON_MAX_TOKENS,
	})
	blockTypes = newEnum("BlockType", map[model.BlockType]reinsv1.BlockType{
		model.BlockText:       reinsv1.BlockType_BLOCK_TYPE_TEXT,
		model.BlockToolUse:    reinsv1.BlockType_BLOCK_TYPE_TOOL_USE,
		model.BlockToolResult: reinsv1.BlockType_BLOCK_TYPE_TOOL_RESULT,
		model.BlockImage:      reinsv1.BlockType_BLOCK_TYPE_IMAGE,
	})
	policyActions = newEnum("PolicyAction", map[policy.Action]reinsv1.PolicyAction{
		policy.Allow: reinsv1.PolicyAction_POLICY_ACTION_ALLOW,
		policy.Ask:   reinsv1.PolicyAction_POLICY_ACTION_ASK,
		policy.Deny:  reinsv1.PolicyAction_POLICY_ACTION_DENY,
	})
)

// RunStatus converts a run's status for the wire.
func RunStatus(s runlog.Status) reinsv1.RunStatus { return runStatuses.proto(s) }

// RunStatusFromProto converts a wire status back ("" if unspecified).
func RunStatusFromProto(p reinsv1.RunStatus) runlog.Status { return runStatuses.fromProto(p) }

// SandboxState converts a sandbox's state for the wire.
func SandboxState(s sandbox.State) reinsv1.SandboxState { return sandboxStates.proto(s) }

// SandboxStateFromProto converts a wire state back.
func SandboxStateFromProto(p reinsv1.SandboxState) sandbox.State { return sandboxStates.fromProto(p) }

// SandboxReason converts why a sandbox stopped for the wire ("" is
// UNSPECIFIED: not stopped).
func SandboxReason(r sandbox.Reason) reinsv1.SandboxReason { return sandboxReasons.proto(r) }

// SandboxReasonFromProto converts a wire reason back.
func SandboxReasonFromProto(p reinsv1.SandboxReason) sandbox.Reason {
	return sandboxReasons.fromProto(p)
}

// ProgressPhase converts a creation phase (image.Phase*, sandbox.PhaseBoot).
func ProgressPhase(s string) reinsv1.ProgressPhase { return progressPhases.proto(s) }

// ProgressPhaseFromProto converts a wire phase back.
func ProgressPhaseFromProto(p reinsv1.ProgressPhase) string { return progressPhases.fromProto(p) }

// EventType converts a log event's type (runlog.Event*).
func EventType(s string) reinsv1.EventType { return eventTypes.proto(s) }

// EventTypeFromProto converts a wire event type back.
func EventTypeFromProto(p reinsv1.EventType) string { return eventTypes.fromProto(p) }

// StopReason converts why a model stopped.
func StopReason(s model.StopReason) reinsv1.StopReason { return stopReasons.proto(s) }

// StopReasonFromProto converts a wire stop reason back.
func StopReasonFromProto(p reinsv1.StopReason) model.StopReason { return stopReasons.fromProto(p) }

// BlockType converts a content block's type.
func BlockType(s model.BlockType) reinsv1.BlockType { return blockTypes.proto(s) }

// BlockTypeFromProto converts a wire block type back.
func BlockTypeFromProto(p reinsv1.BlockType) model.BlockType { return blockTypes.fromProto(p) }

// PolicyAction converts what a policy said of a call.
func PolicyAction(a policy.Action) reinsv1.PolicyAction { return policyActions.proto(a) }

// PolicyActionFromProto converts a wire action back.
func PolicyActionFromProto(p reinsv1.PolicyAction) policy.Action { return policyActions.fromProto(p) }
