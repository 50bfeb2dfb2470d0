// Package wiretest holds one payload of each event type of a run's log,
// with every field set, for the tests that carry events across the wire
// and render them.
package wiretest

import (
	"encoding/json"
	"net/netip"
	"time"

	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/runlog"
)

// Network returns network rules with every field set, in normalized
// form.
func Network() egress.Rules {
	return egress.Rules{Mode: egress.ModeOpen,
		AllowHosts: []egress.HostRule{{Host: "*.pypi.org"}, {Host: "api.github.com", Port: 443}},
		DenyHosts:  []egress.HostRule{{Host: "evil.example.com"}},
		AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("2001:db8::/32"), netip.MustParsePrefix("203.0.113.0/24")},
		Secrets:    []egress.SecretRef{{Name: "GITHUB_TOKEN", Hosts: []string{"*.github.com", "api.github.com"}}}}
}

// checkpointEvery is the sample spec's.
var checkpointEvery = 7

// Samples returns a payload for each event type (runlog.Event*), every
// field set to a value that can be told apart.
func Samples() map[string]any {
	sb := func(note string) runlog.SandboxEvent {
		return runlog.SandboxEvent{Name: "default", ID: "sbx" + note, Image: "busybox", Previous: "sbxold",
			Reason: "it vanished " + note, Note: "files restored " + note, Snapshot: "sha256:" + note, From: runlog.FromSnapshot, By: "alice " + note}
	}
	return map[string]any{
		runlog.EventRunCreated: runlog.RunCreated{Spec: runlog.Spec{Task: "fix the test", Model: "script:x", System: "be brief",
			Sandboxes: map[string]string{"default": "busybox"}, MaxSteps: 7, MaxCost: 1.5, MaxTokens: 9000,
			Timeout: runlog.Duration(90 * time.Second), Tools: []string{"bash"}, Policy: "tools: {bash: ask}", Script: `{"turns":[]}`,
			Network: Network(), Agent: "codex", Memory: 3 << 30, CheckpointEvery: &checkpointEvery,
			KeepScreenshots: 5, Screens: map[string]string{"web": "1280x800"},
			Uploads: []runlog.Upload{{Path: "/workspace/in", Dir: true}, {Path: "/workspace/in/a.txt", Size: 3}}, UploadsDigest: "sha256:up",
			Downloads: []string{"/workspace/*.md"}}},
		runlog.EventModelResponse: runlog.ModelResponse{Step: 2, Content: []model.Block{
			{Type: model.BlockText, Text: "Checking the disk."},
			{Type: model.BlockToolUse, ToolCallID: "call_1_0", ToolName: "bash", Input: json.RawMessage(`{"command":"df -h"}`)},
			{Type: model.BlockToolUse, ToolCallID: "call_1_1", ToolName: "bash", Input: json.RawMessage(`"not an object"`), InputError: "arguments are not an object"},
			{Type: model.BlockToolResult, ToolCallID: "call_0_0", Text: "ok", IsError: true,
				Content: []model.Block{{Type: model.BlockImage, MediaType: "image/png", Data: "iVBORw0KGgo="}}},
		}, StopReason: model.StopToolUse, Usage: model.Usage{InputTokens: 800, OutputTokens: 13, CacheReadTokens: 5, CacheWriteTokens: 6},
			CostUSD: 0.0027, DurationMS: 41, Gateway: &runlog.GatewayCall{Sandbox: "sbx1", Wire: "anthropic", Asked: "claude-haiku-4-5",
				Model: "script:turns", Stream: true, Status: 200, Error: "none", FirstMS: 7, Messages: 5, Tools: 17, SystemChars: 9000,
				New: []model.Block{{Type: model.BlockToolResult, ToolCallID: "toolu_1", Text: "hello from Bash", IsError: true}}}},
		runlog.EventAgentStarting: runlog.AgentProgram{Sandbox: "sbx1", Argv: []string{"claude", "-p", "--", "fix it"},
			Env: []string{"ANTHROPIC_BASE_URL", "TMPDIR"}, Key: "run_x/agent", Pid: 41, OOMKills: 1},
		runlog.EventAgentStarted: runlog.AgentProgram{Sandbox: "sbx2", Argv: []string{"codex", "exec", "--", "fix it"},
			Env: []string{"OPENAI_API_KEY"}, Key: "run_y/agent", Pid: 42, OOMKills: 2},
		runlog.EventToolCall: runlog.ToolCall{Step: 2, CallID: "call_1_0", Name: "bash", Input: json.RawMessage(`{"command":"df -h"}`), Key: "run_x/2/call_1_0"},
		runlog.EventToolResult: runlog.ToolResult{Step: 2, CallID: "call_1_0", Name: "bash", Text: "Filesystem  Size", IsError: true,
			Artifact: "sha256:aa", FullBytes: 70000, Images: []string{"sha256:bb"}, ImageBytes: []int64{4321}, DurationMS: 12, Unknown: true, Untrusted: true},
		runlog.EventSandboxCreated:   sb("created"),
		runlog.EventSandboxLost:      sb("lost"),
		runlog.EventSandboxReplaced:  sb("replaced"),
		runlog.EventSandboxSuspended: sb("suspended"),
		runlog.EventSandboxResumed:   sb("resumed"),
		runlog.EventSandboxLifecycle: sb("lifecycle"),
		runlog.EventTakeover:         sb("takeover"),
		runlog.EventHandback:         sb("handback"),
		runlog.EventEgress: runlog.Egress{Sandbox: "default", ID: "sbx1", AfterSeq: 4, LastSeq: 107, Omitted: 3, Denied: 2,
			Entries: []egress.Entry{{Time: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), Sandbox: "sbx1", Proto: "tls", Host: "api.github.com",
				Port: 443, Addr: "140.82.112.5:443", Allowed: true, Rule: "allow-host *.github.com", BytesOut: 517, BytesIn: 4096,
				Duration: 250 * time.Millisecond, Note: "secret GH injected"}, {Time: time.Date(2026, 12, 1, 9, 0, 1, 0, time.UTC),
				Sandbox: "sbx1", Proto: "dns", Host: "evil.test", Rule: "not in the allowlist"}}},
		runlog.EventWaiting:     runlog.Waiting{CallID: "call_3_0", Question: "Which branch?"},
		runlog.EventHumanAnswer: runlog.HumanAnswer{CallID: "call_3_0", Text: "main, please", Actor: "admin"},
		runlog.EventRecovered:   runlog.Note{Message: "the service restarted"},
		runlog.EventPaused:      runlog.Note{Message: "paused by admin"},
		runlog.EventResumed:     runlog.Note{Message: "resumed by admin"},
		runlog.EventFinished: runlog.Finished{Status: runlog.StatusFailed, Text: "gave up", Reason: "out of steps",
			Usage: model.Usage{InputTokens: 1, OutputTokens: 2, CacheReadTokens: 3, CacheWriteTokens: 4}, Cost: 0.5, Steps: 7},
		runlog.EventPolicyDecision: runlog.PolicyDecision{CallID: "call_4_0", Tool: "bash", Action: "deny", Rule: "no-rm-rf", Reason: "rm -rf is refused"},
		runlog.EventApprovalRequested: runlog.ApprovalRequested{CallID: "call_5_0", Tool: "send_email", Input: json.RawMessage(`{"to":"a@example.com"}`),
			Rule: "trifecta", Reason: "untrusted content was read"},
		runlog.EventApprovalDecided: runlog.ApprovalDecided{CallID: "call_5_0", Approved: true, Actor: "admin",
			Edited: json.RawMessage(`{"to":"b@example.com"}`), Always: true, Reason: "fine"},
		runlog.EventForked: runlog.Forked{From: "run_orig", AtSeq: 4, Model: "script:y", Message: "forked from run_orig at 4",
			Snapshots: map[string]string{"default": "sha256:dd"}},
		runlog.EventCheckpoint: runlog.Checkpoint{Sandbox: "default", ID: "sbx1", Digest: "sha256:ee", Seq: 41, Files: 12, Bytes: 3456,
			Reason: "every 10 mutating calls", Error: "unset on a taken one; set here to carry every field"},
		runlog.EventCheckpointFailed: runlog.Checkpoint{Sandbox: "db", ID: "sbx2", Digest: "sha256:none", Seq: 42, Files: 1, Bytes: 2,
			Reason: "before the run parks", Error: "no space left on the snapshot store"},
		runlog.EventArtifact: runlog.Artifact{Name: "report.txt", Digest: "sha256:cc", Size: 1234, Source: "default:/workspace/report.txt", Error: "not saved: why"},
	}
}
