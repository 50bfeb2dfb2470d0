package gateway

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/model/anthropic"
	"github.com/reinsdev/reins/model/openai"
)

// capture is a model that keeps the request it is given and answers with
// a fixed response.
type capture struct {
	mu   sync.Mutex
	got  *model.Request
	resp *model.Response
}

func (c *capture) Generate(_ context.Context, req *model.Request) (*model.Response, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = req
	return c.resp, nil
}

// conversation is a run two steps in: a tool call answered with text, an
// earlier failed call, a screenshot, and tools with schemas.
func conversation() *model.Request {
	return &model.Request{
		Model:     "claude-opus-4-1",
		MaxTokens: 2048,
		System:    "You are a careful engineer. Use the tools.",
		Tools: []model.ToolSpec{
			{Name: "bash", Description: "Run a shell command.", InputSchema: json.RawMessage(
				`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`)},
			{Name: "screenshot", Description: "Capture the screen.", InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)},
		},
		Messages: []model.Message{
			{Role: model.RoleUser, Content: []model.Block{{Type: model.BlockText, Text: "Fix the failing test."}}},
			{Role: model.RoleAssistant, Content: []model.Block{
				{Type: model.BlockText, Text: "Running the tests."},
				{Type: model.BlockToolUse, ToolCallID: "toolu_1", ToolName: "bash", Input: json.RawMessage(`{"command":"go test ./..."}`)},
			}},
			{Role: model.RoleUser, Content: []model.Block{
				{Type: model.BlockToolResult, ToolCallID: "toolu_1", Text: "--- FAIL: TestAdd\nexit status 1", IsError: true},
			}},
			{Role: model.RoleAssistant, Content: []model.Block{
				{Type: model.BlockToolUse, ToolCallID: "toolu_2", ToolName: "screenshot", Input: json.RawMessage(`{}`)},
			}},
			{Role: model.RoleUser, Content: []model.Block{
				{Type: model.BlockToolResult, ToolCallID: "toolu_2", Text: "1024x768"},
			}},
		},
	}
}

// reins' own providers, pointed at the gateway, send a conversation that
// the gateway reads back as it was; the answer the gateway writes reads
// back in the provider as the model gave it.
func TestRoundTripReinsProviders(t *testing.T) {
	answer := &model.Response{
		Content: []model.Block{
			{Type: model.BlockText, Text: "The fix is in; rerunning."},
			{Type: model.BlockToolUse, ToolCallID: "toolu_3", ToolName: "bash", Input: json.RawMessage(`{"command":"go test ./..."}`)},
		},
		StopReason: model.StopToolUse,
		Usage:      model.Usage{InputTokens: 35, OutputTokens: 61, CacheReadTokens: 4833},
	}
	c := &capture{resp: answer}
	e := newEnv(t, envOpts{open: func(Target) (model.Model, string, error) { return c, "", nil }})
	e.l.set(func(l *ledger) { l.target = Target{Model: "script:capture"} })
	am, err := anthropic.New(anthropic.Config{APIKey: token("sb1"), BaseURL: e.url})
	if err != nil {
		t.Fatal(err)
	}
	om, err := openai.New(openai.Config{APIKey: token("sb1"), BaseURL: e.url + "/v1"})
	if err != nil {
		t.Fatal(err)
	}
	compact := cmp.Transformer("compact", func(r json.RawMessage) string {
		var v any
		json.Unmarshal(r, &v)
		b, _ := json.Marshal(v)
		return string(b)
	})
	for name, m := range map[string]model.Model{"anthropic": am, "openai": om} {
		got, err := m.Generate(context.Background(), conversation())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if diff := cmp.Diff(answer, got, compact); diff != "" {
			t.Errorf("%s: answer (-want +got):\n%s", name, diff)
		}
		want := conversation()
		want.Model = "capture"
		if name == "openai" { // Chat Completions has no is_error: reins' provider says it in the text
			res := &want.Messages[2].Content[0]
			res.Text, res.IsError = "Error: "+res.Text, false
		}
		if diff := cmp.Diff(want, c.got, compact); diff != "" {
			t.Errorf("%s: request as the gateway read it (-want +got):\n%s", name, diff)
		}
		e.l.waitEnd(t)
	}
}

// What the OpenAI wires carry that reins' own provider does not send:
// developer messages, images as data URLs, reasoning and server tools
// (left out), arguments that are not an object.
func TestParseOpenAIShapes(t *testing.T) {
	img := model.Block{Type: model.BlockImage, MediaType: "image/png", Data: "iVBO"}
	schema := json.RawMessage(`{"type":"object"}`)
	for _, c := range []struct {
		wire Wire
		body string
		want *model.Request
	}{
		{WireOpenAIResponses, `{"model":"gpt-5","instructions":"sys","max_output_tokens":99,"input":[
			{"type":"message","role":"developer","content":[{"type":"input_text","text":"dev"}]},
			{"role":"user","content":[{"type":"input_text","text":"look"},{"type":"input_image","image_url":"data:image/png;base64,iVBO"},{"type":"input_image","image_url":"https://example.com/x.png"}]},
			{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"xx"},
			{"type":"function_call","call_id":"c1","name":"exec_command","arguments":"{\"cmd\":\"ls\"}"},
			{"type":"function_call","call_id":"c2","name":"exec_command","arguments":"ls -l"},
			{"type":"function_call_output","call_id":"c1","output":"a.txt"},
			{"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"shot"},{"type":"input_image","image_url":"data:image/png;base64,iVBO"}]}],
			"tools":[{"type":"function","name":"exec_command","description":"run","parameters":{"type":"object"}},{"type":"web_search"},{"type":"namespace","name":"ns","tools":[]}]}`,
			&model.Request{Model: "gpt-5", System: "sys\n\ndev", MaxTokens: 99, Messages: []model.Message{
				{Role: model.RoleUser, Content: []model.Block{{Type: model.BlockText, Text: "look"}, img}},
				{Role: model.RoleAssistant, Content: []model.Block{
					{Type: model.BlockToolUse, ToolCallID: "c1", ToolName: "exec_command", Input: json.RawMessage(`{"cmd":"ls"}`)},
					{Type: model.BlockToolUse, ToolCallID: "c2", ToolName: "exec_command", Input: json.RawMessage(`"ls -l"`), InputError: "the arguments are not a JSON object"},
				}},
				{Role: model.RoleUser, Content: []model.Block{
					{Type: model.BlockToolResult, ToolCallID: "c1", Text: "a.txt"},
					{Type: model.BlockToolResult, ToolCallID: "c2", Text: "shot", Content: []model.Block{img}},
				}},
			}, Tools: []model.ToolSpec{{Name: "exec_command", Description: "run", InputSchema: schema}}}},
		{WireOpenAIChat, `{"model":"gpt-4.1","max_completion_tokens":7,"messages":[
			{"role":"system","content":"sys"},{"role":"developer","content":[{"type":"text","text":"dev"}]},
			{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBO"}}]},
			{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"ls\"}"}}]},
			{"role":"tool","tool_call_id":"c1","content":"a.txt"}],
			"tools":[{"type":"function","function":{"name":"bash","description":"run","parameters":{"type":"object"}}}]}`,
			&model.Request{Model: "gpt-4.1", System: "sys\n\ndev", MaxTokens: 7, Messages: []model.Message{
				{Role: model.RoleUser, Content: []model.Block{{Type: model.BlockText, Text: "look"}, img}},
				{Role: model.RoleAssistant, Content: []model.Block{{Type: model.BlockToolUse, ToolCallID: "c1", ToolName: "bash", Input: json.RawMessage(`{"command":"ls"}`)}}},
				{Role: model.RoleUser, Content: []model.Block{{Type: model.BlockToolResult, ToolCallID: "c1", Text: "a.txt"}}},
			}, Tools: []model.ToolSpec{{Name: "bash", Description: "run", InputSchema: schema}}}},
	} {
		p, err := parse(c.wire, []byte(c.body))
		if err != nil {
			t.Fatalf("%s: %v", c.wire, err)
		}
		if diff := cmp.Diff(c.want, p.req); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.wire, diff)
		}
	}
}
