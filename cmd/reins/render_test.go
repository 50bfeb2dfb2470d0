package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/internal/consttest"
	"github.com/reinsdev/reins/server/wire"
	"github.com/reinsdev/reins/server/wire/wiretest"
	"github.com/reinsdev/reins/store"
)

// TestRenderEvents: every event type, carried to the wire as the server
// carries it, renders in `reins runs events` (a line with its payload) and,
// where the live view shows it, in `reins run`. The live view reads the
// typed payloads, not JSON.
func TestRenderEvents(t *testing.T) {
	live := map[string]string{ // what the live view prints for the sample
		"model_response":     "Checking the disk.",
		"tool_call":          "▸ bash  df -h",
		"tool_result":        "✗ Filesystem  Size",
		"sandbox_created":    "sandbox default (busybox) created: sbxcreated",
		"sandbox_lost":       "sandbox default lost: it vanished lost",
		"sandbox_replaced":   "sandbox default replaced by sbxreplaced: files restored replaced",
		"waiting":            "the agent asks: Which branch?",
		"artifact":           "artifact report.txt (1234 bytes)",
		"approval_requested": "? approve send_email {\"to\":\"a@example.com\"}\n  rule trifecta: untrusted content was read",
		"approval_decided":   "approved by admin, edited to `b@example.com`",
		"policy_decision":    "✗ bash denied by policy (no-rm-rf): rm -rf is refused",
		"paused":             "◆ paused",
		"resumed":            "◆ resumed",
		"forked":             "◆ forked from run_orig at event 4\n  sandbox default starts from checkpoint sha256:dd",
		"egress":             "⊘ dns evil.test refused: not in the allowlist\n  ⇢ 1 connection(s) out, allowed\n  ⇢ 3 more in reins sandbox egress sbx1",
		"agent_started":      "◆ program started in sbx2 (pid 42): codex exec -- fix it",
		"sandbox_suspended":  "◆ sandbox default suspended: files restored suspended",
		"sandbox_resumed":    "◆ sandbox default resumed: files restored resumed",
		"sandbox_lifecycle":  "◆ sandbox default it vanished lifecycle: files restored lifecycle",
		"checkpoint":         "◆ checkpoint of sandbox default after event 41: sha256:ee (3.4 KiB in 12 files; every 10 mutating calls)",
		"takeover":           "◆ alice takeover took over the screen of sandbox default: the run's computer calls wait for the hand-back",
		"handback":           "◆ alice handback handed the screen of sandbox default back: the run goes on",
		"checkpoint_failed":  "◆ no checkpoint of sandbox db after event 42 (the run goes on): no space left on the snapshot store",
	}
	line := map[string]string{ // what `runs events` shows of it
		"run_created":        `"task":"fix the test"`,
		"model_response":     `"input_json":"{\"command\":\"df -h\"}"`,
		"tool_call":          `"key":"run_x/2/call_1_0"`,
		"tool_result":        `"untrusted":true`,
		"waiting":            `"question":"Which branch?"`,
		"human_answer":       `"text":"main, please"`,
		"recovered":          `"message":"the service restarted"`,
		"finished":           `"status":"RUN_STATUS_FAILED"`,
		"policy_decision":    `"action":"POLICY_ACTION_DENY"`,
		"approval_requested": `"input_json":"{\"to\":\"a@example.com\"}"`,
		"approval_decided":   `"edited_input_json":"{\"to\":\"b@example.com\"}"`,
		"forked":             `"from":"run_orig"`,
		"artifact":           `"source":"default:/workspace/report.txt"`,
		"egress":             `"rule":"allow-host *.github.com"`,
		"agent_starting":     `"argv":["claude","-p","--","fix it"]`,
		"agent_started":      `"pid":42`,
		"checkpoint":         `"digest":"sha256:ee"`,
		"checkpoint_failed":  `"error":"no space left on the snapshot store"`,
	}
	samples := wiretest.Samples()
	types := consttest.Prefixed(t, "../../runlog", "Event")
	// The model's response comes first, as in a log: it names the calls.
	sort.SliceStable(types, func(i, j int) bool { return types[i] == "model_response" })
	var out bytes.Buffer
	v := newRunView(&out, false)
	v.replay, v.tty, v.status = true, false, newStatusLine(os.Stderr)
	for i, typ := range types {
		data, err := json.Marshal(samples[typ])
		if err != nil {
			t.Fatal(err)
		}
		ev := wire.Event(store.Event{RunID: "run_x", Seq: int64(i + 1), Type: typ, Time: time.Now(), Data: data})
		if got := eventName(ev.Type); got != typ {
			t.Errorf("%s is named %q", typ, got)
		}
		l := eventLine(ev)
		if want := line[typ]; want == "" && strings.HasPrefix(typ, "sandbox_") {
			want = `"id":"sbx` + strings.TrimPrefix(typ, "sandbox_") + `"`
			line[typ] = want
		}
		if l == "" || !strings.Contains(l, line[typ]) {
			t.Errorf("runs events line of %s = %s, want it to hold %s", typ, l, line[typ])
		}
		out.Reset()
		v.event(context.Background(), nil, "run_x", ev)
		if want, ok := live[typ]; ok && !strings.Contains(out.String(), want) {
			t.Errorf("live view of %s = %q, want it to hold %q", typ, out.String(), want)
		} else if !ok && out.Len() != 0 {
			t.Errorf("live view of %s = %q, want nothing", typ, out.String())
		}
	}
	if v.step != 2 || v.tokens != 813 {
		t.Errorf("the live view's step and tokens: %d, %d", v.step, v.tokens)
	}
}

// TestRenderGatewayCall: a call an agent program made through the model
// gateway renders as a turn: the tool results new in its request, the
// model's text and calls, then its model, usage, cost and latency.
func TestRenderGatewayCall(t *testing.T) {
	data, _ := json.Marshal(wiretest.Samples()["model_response"])
	ev := wire.Event(store.Event{RunID: "run_x", Seq: 3, Type: "model_response", Time: time.Now(), Data: data})
	var out bytes.Buffer
	v := newRunView(&out, false)
	v.replay, v.tty, v.status = true, false, newStatusLine(os.Stderr)
	v.event(context.Background(), nil, "run_x", ev)
	want := "  ✗ hello from Bash\nChecking the disk.\n▸ bash  df -h\n▸ bash  \n" +
		"  call 2 · script:turns · 800 in, 13 out (5 cached) · $0.0027 · first byte 7ms, 41ms\n"
	if out.String() != want {
		t.Errorf("gateway call rendered as\n%s\nwant\n%s", out.String(), want)
	}
	// A refused call says so.
	var mr map[string]any
	json.Unmarshal(data, &mr)
	mr["gateway"].(map[string]any)["status"] = 403
	data, _ = json.Marshal(mr)
	out.Reset()
	v.event(context.Background(), nil, "run_x", wire.Event(store.Event{RunID: "run_x", Seq: 4, Type: "model_response", Time: time.Now(), Data: data}))
	if !strings.Contains(out.String(), "✗ 403: none") {
		t.Errorf("a refused call: %s", out.String())
	}
	// An offline model's call, which costs nothing, claims no cost.
	mr["cost_usd"] = 0
	data, _ = json.Marshal(mr)
	out.Reset()
	v.event(context.Background(), nil, "run_x", wire.Event(store.Event{RunID: "run_x", Seq: 5, Type: "model_response", Time: time.Now(), Data: data}))
	if !strings.Contains(out.String(), "call 2 · script:turns · 800 in, 13 out (5 cached) · first byte") {
		t.Errorf("an offline call: %s", out.String())
	}
}

func TestParseRunStatuses(t *testing.T) {
	got, err := parseRunStatuses([]string{"waiting_approval", "RUN_STATUS_SUCCEEDED", "Failed"})
	want := []reinsv1.RunStatus{reinsv1.RunStatus_RUN_STATUS_WAITING_APPROVAL, reinsv1.RunStatus_RUN_STATUS_SUCCEEDED, reinsv1.RunStatus_RUN_STATUS_FAILED}
	if err != nil || len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("%v, %v", got, err)
	}
	if _, err := parseRunStatuses([]string{"asleep"}); err == nil || !strings.Contains(err.Error(), "waiting_approval") {
		t.Errorf("unknown status: %v", err)
	}
}

// TestDescribeCallOfAgentPrograms: the tool calls of in-box programs
// show their argument: Codex's exec_command has cmd, Claude Code's Read
// and Edit have file_path.
func TestDescribeCallOfAgentPrograms(t *testing.T) {
	for _, c := range []struct{ name, input, want string }{
		{"exec_command", `{"cmd":"uname -sr"}`, "exec_command  uname -sr"},
		{"Read", `{"file_path":"/workspace/a.go"}`, "Read  /workspace/a.go"},
		{"Bash", `{"command":"ls","description":"list"}`, "Bash  ls"},
		{"computer", `{"action":"left_click","coordinate":[100,200],"sandbox":"web"}`, "computer@web  left_click 100,200"},
		{"computer", `{"action":"left_click_drag","start_coordinate":[1,2],"coordinate":[3,4]}`, "computer  left_click_drag 1,2 3,4"},
		{"computer", `{"action":"type","text":"hello"}`, "computer  type hello"},
		{"computer", `{"action":"screenshot"}`, "computer  screenshot"},
	} {
		if got := describeCall(c.name, c.input); got != c.want {
			t.Errorf("describeCall(%s, %s) = %q, want %q", c.name, c.input, got, c.want)
		}
	}
}

// TestRenderEditedCall: a call a person edited before approving shows,
// in the transcript, the command that ran, marked as edited.
func TestRenderEditedCall(t *testing.T) {
	var out bytes.Buffer
	v := newRunView(&out, false)
	v.replay, v.tty, v.status = true, false, newStatusLine(os.Stderr)
	for _, ev := range []*reinsv1.RunEvent{
		{Type: reinsv1.EventType_EVENT_TYPE_MODEL_RESPONSE, Payload: &reinsv1.RunEvent_ModelResponse{ModelResponse: &reinsv1.ModelResponse{Step: 1,
			Content: []*reinsv1.Block{{Type: reinsv1.BlockType_BLOCK_TYPE_TOOL_USE, ToolCallId: "c1", ToolName: "bash", InputJson: `{"command":"rm -rf build"}`}}}}},
		{Type: reinsv1.EventType_EVENT_TYPE_APPROVAL_DECIDED, Payload: &reinsv1.RunEvent_ApprovalDecided{ApprovalDecided: &reinsv1.ApprovalDecided{
			CallId: "c1", Approved: true, Actor: "admin", EditedInputJson: `{"command":"rm -rf build/tmp"}`}}},
		{Type: reinsv1.EventType_EVENT_TYPE_TOOL_CALL, Payload: &reinsv1.RunEvent_ToolCall{ToolCall: &reinsv1.ToolCall{
			CallId: "c1", Name: "bash", InputJson: `{"command":"rm -rf build/tmp"}`}}},
	} {
		v.event(context.Background(), nil, "run_x", ev)
	}
	want := "  approved by admin, edited to `rm -rf build/tmp`\n▸ bash  rm -rf build/tmp  (edited)\n"
	if out.String() != want {
		t.Errorf("transcript:\n%s\nwant:\n%s", out.String(), want)
	}
}
