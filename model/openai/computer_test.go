package openai_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/model/internal/fakehttp"
)

// TestComputerTool: OpenAI has no native computer tool, so computer goes
// as a function tool with its schema; a screenshot in its result becomes
// an image part of the user message after the tool message; the model's
// call of computer comes back as a tool call.
func TestComputerTool(t *testing.T) {
	srv := fakehttp.New(t, fakehttp.Reply{File: "testdata/computer_call.response.json"})
	schema := `{"type":"object","properties":{"action":{"type":"string","enum":["screenshot","left_click"]},"coordinate":{"type":"array","items":{"type":"integer"}}},"required":["action"]}`
	req := &model.Request{
		Tools: []model.ToolSpec{{Name: "computer", Description: "Use the desktop. The screen is 1280x720 pixels.", InputSchema: json.RawMessage(schema),
			Computer: &model.ComputerDisplay{Width: 1280, Height: 720}}},
		Messages: []model.Message{
			{Role: model.RoleUser, Content: []model.Block{{Type: model.BlockText, Text: "Click the button."}}},
			{Role: model.RoleAssistant, Content: []model.Block{{Type: model.BlockToolUse, ToolCallID: "call_shot", ToolName: "computer", Input: json.RawMessage(`{"action":"screenshot"}`)}}},
			{Role: model.RoleUser, Content: []model.Block{{Type: model.BlockToolResult, ToolCallID: "call_shot", Text: "screenshot (1280x720)",
				Content: []model.Block{{Type: model.BlockImage, MediaType: "image/png", Data: "iVBORw0KGgo="}}}}},
		},
	}
	r, err := newModel(t, srv).Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := []model.Block{{Type: model.BlockToolUse, ToolCallID: "call_click", ToolName: "computer", Input: json.RawMessage(`{"action":"left_click","coordinate":[100,200]}`)}}
	if diff := cmp.Diff(want, r.Content); diff != "" || r.StopReason != model.StopToolUse {
		t.Errorf("response (-want +got):\n%s (stop %s)", diff, r.StopReason)
	}
	var body struct {
		Tools []struct {
			Type     string `json:"type"`
			Function struct {
				Name        string         `json:"name"`
				Description string         `json:"description"`
				Parameters  map[string]any `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
		Messages []struct {
			Role       string          `json:"role"`
			ToolCallID string          `json:"tool_call_id"`
			Content    json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(srv.Requests()[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	var wantSchema map[string]any
	json.Unmarshal([]byte(schema), &wantSchema)
	if len(body.Tools) != 1 || body.Tools[0].Type != "function" || body.Tools[0].Function.Name != "computer" {
		t.Fatalf("tools %+v", body.Tools)
	}
	if diff := cmp.Diff(wantSchema, body.Tools[0].Function.Parameters); diff != "" {
		t.Errorf("schema (-want +got):\n%s", diff)
	}
	if n := len(body.Messages); n != 4 || body.Messages[2].Role != "tool" || body.Messages[2].ToolCallID != "call_shot" || body.Messages[3].Role != "user" {
		t.Fatalf("messages %+v", body.Messages)
	}
	var parts []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		ImageURL struct {
			URL string `json:"url"`
		} `json:"image_url"`
	}
	if err := json.Unmarshal(body.Messages[3].Content, &parts); err != nil {
		t.Fatalf("the user message after the tool result: %s", body.Messages[3].Content)
	}
	if len(parts) != 2 || parts[1].Type != "image_url" || parts[1].ImageURL.URL != "data:image/png;base64,iVBORw0KGgo=" {
		t.Errorf("the screenshot went as %+v", parts)
	}
}
