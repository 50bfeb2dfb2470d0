package script_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/model/script"
)

func user(text string) model.Message {
	return model.Message{Role: model.RoleUser, Content: []model.Block{{Type: model.BlockText, Text: text}}}
}

func results(texts ...string) model.Message {
	m := model.Message{Role: model.RoleUser}
	for i, t := range texts {
		m.Content = append(m.Content, model.Block{Type: model.BlockToolResult, ToolCallID: "call_" + string(rune('0'+i)), Text: t})
	}
	return m
}

// TestPlay plays testdata/fix.json as the loop would, step by step.
func TestPlay(t *testing.T) {
	m, err := script.Load("testdata/fix.json")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := &model.Request{Model: "ignored", Messages: []model.Message{user("fix the failing test")}}

	r, err := m.Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want := []model.Block{{Type: model.BlockToolUse, ToolCallID: "call_0_0", ToolName: "bash", Input: json.RawMessage(`{"command": "go test ./..."}`)}}
	if diff := cmp.Diff(want, r.Content); diff != "" {
		t.Errorf("step 0 (-want +got):\n%s", diff)
	}
	if r.StopReason != model.StopToolUse || r.Usage.InputTokens == 0 || r.Usage.OutputTokens == 0 {
		t.Errorf("step 0: stop %q, usage %+v", r.StopReason, r.Usage)
	}

	req.Messages = append(req.Messages, model.Message{Role: model.RoleAssistant, Content: r.Content},
		results("--- FAIL: TestAdd\nFAIL"))
	r, err = m.Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Content) != 2 || r.Content[0].ToolCallID != "call_1_0" || r.Content[1].ToolCallID != "call_1_1" || r.Content[1].ToolName != "bash" {
		t.Errorf("step 1: %+v", r.Content)
	}

	req.Messages = append(req.Messages, model.Message{Role: model.RoleAssistant, Content: r.Content},
		results("edited add.go", "ok  \texample.com/add\t0.01s"))
	r, err = m.Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]model.Block{{Type: model.BlockText, Text: "Fixed: Add subtracted instead of adding."}}, r.Content); diff != "" {
		t.Errorf("step 2 (-want +got):\n%s", diff)
	}
	if r.StopReason != model.StopEndTurn {
		t.Errorf("step 2: stop %q", r.StopReason)
	}

	// The same request gives the same answer: replays are deterministic.
	again, err := m.Generate(ctx, req)
	if err != nil || !cmp.Equal(r, again) {
		t.Errorf("replay: %+v, %v; want %+v", again, err, r)
	}

	req.Messages = append(req.Messages, model.Message{Role: model.RoleAssistant, Content: r.Content}, user("and now?"))
	_, err = m.Generate(ctx, req)
	if err == nil || !strings.Contains(err.Error(), "asked for turn 4, but the script has 3 turns") || !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("past the end: %v", err)
	}
}

func TestExpectFails(t *testing.T) {
	m, err := script.Load("testdata/fix.json")
	if err != nil {
		t.Fatal(err)
	}
	long := "=== RUN TestAdd\n" + strings.Repeat("x", 1000) + "\nPASS\nok example.com/add"
	req := &model.Request{Messages: []model.Message{
		user("fix it"),
		{Role: model.RoleAssistant, Content: []model.Block{{Type: model.BlockToolUse, ToolCallID: "call_0_0", ToolName: "bash", Input: json.RawMessage(`{}`)}}},
		results(long),
	}}
	_, err = m.Generate(context.Background(), req)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, want := range []string{`turn 2 expects "FAIL" in the last observation`, "=== RUN TestAdd", "ok example.com/add", " … "} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if len(msg) > 600 {
		t.Errorf("error not truncated: %d bytes", len(msg))
	}
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("kind: %v", errdefs.Kind(err))
	}
}

// TestExpectSeesNestedText: text inside a tool result's content counts.
func TestExpectSeesNestedText(t *testing.T) {
	m, err := script.New([]script.Turn{{Expect: "needle", Text: "found"}})
	if err != nil {
		t.Fatal(err)
	}
	req := &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: []model.Block{{
		Type: model.BlockToolResult, Text: "hay",
		Content: []model.Block{{Type: model.BlockText, Text: "a needle"}, {Type: model.BlockImage, MediaType: "image/png", Data: "AAAA"}},
	}}}}}
	if _, err := m.Generate(context.Background(), req); err != nil {
		t.Fatal(err)
	}
}

func TestMalformed(t *testing.T) {
	for _, tc := range []struct{ name, script, want string }{
		{"cut short", `{"turns": [`, "invalid JSON: it ends too early"},
		{"not JSON", "{\"turns\": [\n  {\"text\": 'a'}]}", "invalid JSON at line 2"},
		{"empty file", ``, "empty"},
		{"not an object", `[1, 2]`, "want an object"},
		{"unknown top field", `{"turn": []}`, `unknown field "turn"`},
		{"no turns", `{"turns": []}`, "no turns"},
		{"turns missing", `{}`, "no turns"},
		{"unknown turn field", `{"turns": [{"text": "a"}, {"txt": "b"}]}`, `turn 2: unknown field "txt"`},
		{"empty turn", `{"turns": [{"expect": "x"}]}`, "turn 1: neither text nor tool_calls"},
		{"text not a string", `{"turns": [{"text": 5}]}`, `turn 1: field "text" is number, want a string`},
		{"tool_calls not an array", `{"turns": [{"tool_calls": {"name": "bash"}}]}`, `turn 1: field "tool_calls" is object, want an array`},
		{"call without name", `{"turns": [{"tool_calls": [{"name": "ls"}, {"input": {}}]}]}`, "turn 1: tool call 2: no name"},
		{"input not an object", `{"turns": [{"text": "a"}, {"tool_calls": [{"name": "bash", "input": "ls"}]}]}`, `turn 2: tool call 1: input is "ls", not an object`},
		{"input an array", `{"turns": [{"tool_calls": [{"name": "bash", "input": [1]}]}]}`, `input is [1], not an object`},
		{"unknown call field", `{"turns": [{"tool_calls": [{"name": "bash", "args": {}}]}]}`, `turn 1: tool call 1: unknown field "args"`},
		{"trailing data", `{"turns": [{"text": "a"}]} {}`, "trailing data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.json")
			if err := os.WriteFile(path, []byte(tc.script), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := script.Load(path)
			if err == nil {
				t.Fatalf("loaded")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %q, want it to name %q and the file", err, tc.want)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("kind %v, want invalid argument", errdefs.Kind(err))
			}
		})
	}
}

func TestMissingFile(t *testing.T) {
	_, err := script.Load(filepath.Join(t.TempDir(), "nope.json"))
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "nope.json") {
		t.Errorf("got %v", err)
	}
}

func TestDefaultInput(t *testing.T) {
	m, err := script.New([]script.Turn{{ToolCalls: []script.ToolCall{{Name: "list_files"}}}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.Generate(context.Background(), &model.Request{Messages: []model.Message{user("go")}})
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Content[0].Input) != "{}" {
		t.Errorf("input %s, want {}", r.Content[0].Input)
	}
}
