package anthropic_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/model/internal/fakehttp"
)

// TestComputerTool: a request with the computer tool goes to the Beta
// Messages API with the beta flag, the tool as Anthropic's native
// computer_20251124 with the display's size (zoom on, no display number),
// the other tools and the screenshot of a result as they are; the model's
// call of computer comes back as a tool call.
func TestComputerTool(t *testing.T) {
	srv := fakehttp.New(t, fakehttp.Reply{File: "testdata/computer_use.response.json"}, fakehttp.Reply{File: "testdata/text.response.json"})
	req := conversation()
	req.Tools = append([]model.ToolSpec{{Name: "computer", Description: "Use the desktop.", InputSchema: json.RawMessage(`{"type":"object","properties":{"action":{"type":"string"}}}`),
		Computer: &model.ComputerDisplay{Width: 1280, Height: 720}}}, req.Tools...)
	m := newModel(t, srv)
	r, err := m.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := []model.Block{{Type: model.BlockText, Text: "Clicking the button."},
		{Type: model.BlockToolUse, ToolCallID: "toolu_01Click", ToolName: "computer", Input: json.RawMessage(`{"action": "left_click", "coordinate": [100, 200]}`)}}
	if diff := cmp.Diff(want, r.Content, cmp.Transformer("compact", compact)); diff != "" || r.StopReason != model.StopToolUse {
		t.Errorf("response (-want +got):\n%s (stop %s)", diff, r.StopReason)
	}
	sent := srv.Requests()[0]
	if sent.Path != "/v1/messages" || !strings.Contains(sent.Header.Get("Anthropic-Beta"), "computer-use-2025-11-24") {
		t.Errorf("sent to %s with anthropic-beta %q", sent.Path, sent.Header.Get("Anthropic-Beta"))
	}
	var body sentBody
	if err := json.Unmarshal(sent.Body, &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Tools) != 3 {
		t.Fatalf("tools %v", body.Tools)
	}
	native := body.Tools[0]
	wantTool := map[string]any{"type": "computer_20251124", "name": "computer", "display_width_px": 1280.0, "display_height_px": 720.0, "enable_zoom": true}
	if diff := cmp.Diff(wantTool, native); diff != "" {
		t.Errorf("native tool (-want +got):\n%s", diff)
	}
	if body.Tools[1]["name"] != "bash" || body.Tools[1]["input_schema"] == nil || body.Tools[2]["cache_control"] == nil {
		t.Errorf("the other tools: %v", body.Tools[1:])
	}
	if body.Model != "claude-opus-4-1" || len(body.System) != 1 {
		t.Errorf("model %q system %v", body.Model, body.System)
	}
	last := body.Messages[len(body.Messages)-1].Content[0]
	content, _ := last["content"].([]any)
	if last["type"] != "tool_result" || len(content) != 2 {
		t.Fatalf("the last tool result: %v", last)
	}
	img, _ := content[1].(map[string]any)
	src, _ := img["source"].(map[string]any)
	if img["type"] != "image" || src["type"] != "base64" || src["media_type"] != "image/png" || src["data"] != "iVBORw0KGgo=" {
		t.Errorf("the screenshot went as %v", img)
	}

	// Without the computer tool, the request stays on the Messages API.
	if _, err := m.Generate(context.Background(), conversation()); err != nil {
		t.Fatal(err)
	}
	if h := srv.Requests()[1].Header.Get("Anthropic-Beta"); h != "" {
		t.Errorf("a request without computer has anthropic-beta %q", h)
	}
}
