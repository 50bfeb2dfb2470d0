package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/reinsdev/reins/model"
)

// parsed is a model call's body as the gateway reads it: what it asks,
// and its conversation in reins' vocabulary (as far as it translates:
// thinking, server tools and other provider features are left out of
// req, though a forwarded body keeps them).
type parsed struct {
	model        string
	stream       bool
	includeUsage bool // OpenAI chat: stream_options.include_usage
	req          *model.Request
}

func parse(wire Wire, body []byte) (*parsed, error) {
	if !json.Valid(body) {
		return nil, errors.New("the request body is not JSON")
	}
	var head struct {
		Model         string `json:"model"`
		Stream        bool   `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.Unmarshal(body, &head); err != nil {
		return nil, fmt.Errorf("the request body does not read as a %s request: %v", wireName(wire), err)
	}
	p := &parsed{model: head.Model, stream: head.Stream}
	if head.StreamOptions != nil {
		p.includeUsage = head.StreamOptions.IncludeUsage
	}
	var err error
	switch wire {
	case WireAnthropic:
		p.req, err = parseAnthropic(body)
	case WireOpenAIChat:
		p.req, err = parseChat(body)
	case WireOpenAIResponses:
		p.req, err = parseResponses(body)
	}
	if err != nil {
		return nil, fmt.Errorf("the request body does not read as a %s request: %v", wireName(wire), err)
	}
	p.req.Model = head.Model
	return p, nil
}

func wireName(w Wire) string {
	switch w {
	case WireOpenAIChat:
		return "Chat Completions"
	case WireOpenAIResponses:
		return "Responses"
	}
	return "Messages"
}

// text is a JSON value that is either a string or an array of blocks
// with "text" fields (a system prompt, a message's content).
func textOf(raw json.RawMessage) (string, []json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, nil, err
	}
	var parts []json.RawMessage
	err := json.Unmarshal(raw, &parts)
	return "", parts, err
}

// appendMessage adds blocks to msgs as role, merging with the last
// message when it is the same role (the providers alternate roles).
func appendMessage(msgs []model.Message, role model.Role, blocks ...model.Block) []model.Message {
	if len(blocks) == 0 {
		return msgs
	}
	if n := len(msgs); n > 0 && msgs[n-1].Role == role {
		msgs[n-1].Content = append(msgs[n-1].Content, blocks...)
		return msgs
	}
	return append(msgs, model.Message{Role: role, Content: blocks})
}

func joinSystem(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + "\n\n" + b
}

// --- Anthropic Messages ---

type aBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	Source    *struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
	} `json:"source"`
}

func parseAnthropic(body []byte) (*model.Request, error) {
	var in struct {
		System    json.RawMessage `json:"system"`
		MaxTokens int             `json:"max_tokens"`
		Messages  []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, err
	}
	req := &model.Request{MaxTokens: in.MaxTokens}
	sys, err := anthropicText(in.System)
	if err != nil {
		return nil, fmt.Errorf("system: %v", err)
	}
	req.System = sys
	for i, m := range in.Messages {
		if m.Role == "system" { // Claude Code 2.1 sends one among its messages
			s, err := anthropicText(m.Content)
			if err != nil {
				return nil, fmt.Errorf("messages[%d]: %v", i, err)
			}
			req.System = joinSystem(req.System, s)
			continue
		}
		if m.Role != "user" && m.Role != "assistant" {
			return nil, fmt.Errorf("messages[%d]: role %q is neither user nor assistant", i, m.Role)
		}
		blocks, err := anthropicBlocks(m.Content)
		if err != nil {
			return nil, fmt.Errorf("messages[%d]: %v", i, err)
		}
		req.Messages = appendMessage(req.Messages, model.Role(m.Role), blocks...)
	}
	for _, t := range in.Tools {
		if len(t.InputSchema) == 0 {
			continue // a server tool (web_search, bash_20250124…): not a function
		}
		req.Tools = append(req.Tools, model.ToolSpec{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema})
	}
	return req, nil
}

// anthropicText is a system prompt (a string or text blocks) as text.
func anthropicText(raw json.RawMessage) (string, error) {
	s, parts, err := textOf(raw)
	if err != nil || parts == nil {
		return s, err
	}
	var texts []string
	for _, p := range parts {
		var b aBlock
		if err := json.Unmarshal(p, &b); err != nil {
			return "", err
		}
		if b.Type == "text" {
			texts = append(texts, b.Text)
		}
	}
	return strings.Join(texts, "\n\n"), nil
}

func anthropicBlocks(raw json.RawMessage) ([]model.Block, error) {
	s, parts, err := textOf(raw)
	if err != nil {
		return nil, err
	}
	if parts == nil {
		return []model.Block{{Type: model.BlockText, Text: s}}, nil
	}
	var out []model.Block
	for _, p := range parts {
		var b aBlock
		if err := json.Unmarshal(p, &b); err != nil {
			return nil, err
		}
		switch b.Type {
		case "text":
			out = append(out, model.Block{Type: model.BlockText, Text: b.Text})
		case "image":
			if b.Source != nil && b.Source.Type == "base64" {
				out = append(out, model.Block{Type: model.BlockImage, MediaType: b.Source.MediaType, Data: b.Source.Data})
			}
		case "tool_use":
			in := b.Input
			if len(in) == 0 {
				in = json.RawMessage("{}")
			}
			out = append(out, model.Block{Type: model.BlockToolUse, ToolCallID: b.ID, ToolName: b.Name, Input: in})
		case "tool_result":
			inner, err := anthropicBlocks(b.Content)
			if err != nil {
				return nil, err
			}
			out = append(out, toolResult(b.ToolUseID, b.IsError, inner))
		}
		// thinking, redacted_thinking, server tool blocks: not in reins' vocabulary
	}
	return out, nil
}

// toolResult is the result of call id: its text blocks joined, its
// other blocks (images) kept as its Content.
func toolResult(id string, isError bool, blocks []model.Block) model.Block {
	res := model.Block{Type: model.BlockToolResult, ToolCallID: id, IsError: isError}
	for _, b := range blocks {
		if b.Type == model.BlockText {
			res.Text = joinLines(res.Text, b.Text)
		} else {
			res.Content = append(res.Content, b)
		}
	}
	return res
}

func joinLines(a, b string) string {
	if a == "" {
		return b
	}
	return a + "\n" + b
}

// --- OpenAI Chat Completions ---

type oFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Arguments   string          `json:"arguments"`
}

func parseChat(body []byte) (*model.Request, error) {
	var in struct {
		MaxTokens           int `json:"max_tokens"`
		MaxCompletionTokens int `json:"max_completion_tokens"`
		Messages            []struct {
			Role       string          `json:"role"`
			Content    json.RawMessage `json:"content"`
			ToolCallID string          `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string    `json:"id"`
				Function oFunction `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
		Tools []struct {
			Type     string    `json:"type"`
			Function oFunction `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, err
	}
	req := &model.Request{MaxTokens: max(in.MaxTokens, in.MaxCompletionTokens)}
	for i, m := range in.Messages {
		blocks, err := openAIParts(m.Content)
		if err != nil {
			return nil, fmt.Errorf("messages[%d]: %v", i, err)
		}
		switch m.Role {
		case "system", "developer":
			req.System = joinSystem(req.System, blocksText(blocks))
		case "user":
			req.Messages = appendMessage(req.Messages, model.RoleUser, blocks...)
		case "assistant":
			for _, c := range m.ToolCalls {
				blocks = append(blocks, toolUse(c.ID, c.Function.Name, c.Function.Arguments))
			}
			req.Messages = appendMessage(req.Messages, model.RoleAssistant, blocks...)
		case "tool":
			req.Messages = appendMessage(req.Messages, model.RoleUser, toolResult(m.ToolCallID, false, blocks))
		default:
			return nil, fmt.Errorf("messages[%d]: unknown role %q", i, m.Role)
		}
	}
	for _, t := range in.Tools {
		if t.Type == "function" {
			req.Tools = append(req.Tools, toolSpec(t.Function))
		}
	}
	return req, nil
}

func toolSpec(f oFunction) model.ToolSpec {
	schema := f.Parameters
	if len(schema) == 0 || string(schema) == "null" {
		schema = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	return model.ToolSpec{Name: f.Name, Description: f.Description, InputSchema: schema}
}

// toolUse is a tool call whose arguments arrived as a JSON text; text that
// is not an object is kept as the model wrote it (model.Block.InputError).
func toolUse(id, name, args string) model.Block {
	b := model.Block{Type: model.BlockToolUse, ToolCallID: id, ToolName: name}
	if strings.TrimSpace(args) == "" {
		args = "{}"
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(args), &obj); err != nil || obj == nil {
		b.Input = jsonString(args)
		b.InputError = "the arguments are not a JSON object"
		return b
	}
	b.Input = json.RawMessage(args)
	return b
}

// openAIParts reads a content that is a string or an array of parts
// (text, input_text, output_text, image_url, input_image).
func openAIParts(raw json.RawMessage) ([]model.Block, error) {
	s, parts, err := textOf(raw)
	if err != nil {
		return nil, err
	}
	if parts == nil {
		if s == "" {
			return nil, nil
		}
		return []model.Block{{Type: model.BlockText, Text: s}}, nil
	}
	var out []model.Block
	for _, p := range parts {
		var part struct {
			Type     string          `json:"type"`
			Text     string          `json:"text"`
			ImageURL json.RawMessage `json:"image_url"`
		}
		if err := json.Unmarshal(p, &part); err != nil {
			return nil, err
		}
		switch part.Type {
		case "text", "input_text", "output_text":
			out = append(out, model.Block{Type: model.BlockText, Text: part.Text})
		case "image_url", "input_image":
			if b, ok := dataURL(part.ImageURL); ok {
				out = append(out, b)
			}
		}
	}
	return out, nil
}

// dataURL is an image given as a data: URL ("data:image/png;base64,…"),
// either the string itself or {"url": …}; an image at a web address is
// not in reins' vocabulary.
func dataURL(raw json.RawMessage) (model.Block, bool) {
	var u string
	if json.Unmarshal(raw, &u) != nil {
		var obj struct {
			URL string `json:"url"`
		}
		json.Unmarshal(raw, &obj)
		u = obj.URL
	}
	rest, ok := strings.CutPrefix(u, "data:")
	if !ok {
		return model.Block{}, false
	}
	mt, data, ok := strings.Cut(rest, ";base64,")
	if !ok {
		return model.Block{}, false
	}
	return model.Block{Type: model.BlockImage, MediaType: mt, Data: data}, true
}

func blocksText(blocks []model.Block) string {
	var texts []string
	for _, b := range blocks {
		if b.Type == model.BlockText {
			texts = append(texts, b.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// --- OpenAI Responses ---

func parseResponses(body []byte) (*model.Request, error) {
	var in struct {
		Instructions    string          `json:"instructions"`
		MaxOutputTokens int             `json:"max_output_tokens"`
		Input           json.RawMessage `json:"input"`
		Tools           []struct {
			Type string `json:"type"`
			oFunction
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, err
	}
	req := &model.Request{System: in.Instructions, MaxTokens: in.MaxOutputTokens}
	s, items, err := textOf(in.Input)
	if err != nil {
		return nil, fmt.Errorf("input: %v", err)
	}
	if items == nil && s != "" {
		req.Messages = []model.Message{{Role: model.RoleUser, Content: []model.Block{{Type: model.BlockText, Text: s}}}}
	}
	for i, raw := range items {
		var it struct {
			Type      string          `json:"type"`
			Role      string          `json:"role"`
			Content   json.RawMessage `json:"content"`
			CallID    string          `json:"call_id"`
			Name      string          `json:"name"`
			Arguments string          `json:"arguments"`
			Output    json.RawMessage `json:"output"`
		}
		if err := json.Unmarshal(raw, &it); err != nil {
			return nil, fmt.Errorf("input[%d]: %v", i, err)
		}
		switch {
		case it.Type == "message" || (it.Type == "" && it.Role != ""):
			blocks, err := openAIParts(it.Content)
			if err != nil {
				return nil, fmt.Errorf("input[%d]: %v", i, err)
			}
			switch it.Role {
			case "system", "developer":
				req.System = joinSystem(req.System, blocksText(blocks))
			case "user", "assistant":
				req.Messages = appendMessage(req.Messages, model.Role(it.Role), blocks...)
			default:
				return nil, fmt.Errorf("input[%d]: unknown role %q", i, it.Role)
			}
		case it.Type == "function_call":
			req.Messages = appendMessage(req.Messages, model.RoleAssistant, toolUse(it.CallID, it.Name, it.Arguments))
		case it.Type == "function_call_output":
			blocks, err := openAIParts(it.Output)
			if err != nil {
				return nil, fmt.Errorf("input[%d]: output: %v", i, err)
			}
			req.Messages = appendMessage(req.Messages, model.RoleUser, toolResult(it.CallID, false, blocks))
		}
		// reasoning, web_search_call, and other items: not in reins' vocabulary
	}
	for _, t := range in.Tools {
		if t.Type == "function" {
			req.Tools = append(req.Tools, toolSpec(t.oFunction))
		}
	}
	return req, nil
}

// Estimate is the gateway's answer to count_tokens: a quarter of the
// bytes of the request's text (system, messages, tool inputs and results,
// tools' names, descriptions and schemas), rounded up, at least 1. It is
// the usual rule of thumb for English and code; programs use the count to
// decide when to compact, so an estimate is enough, and the call is not a
// model call (no record, no budget, no provider sees the conversation).
func Estimate(req *model.Request) int {
	n := len(req.System)
	var blocks func([]model.Block)
	blocks = func(bs []model.Block) {
		for _, b := range bs {
			n += len(b.Text) + len(b.ToolName) + len(b.Input) + len(b.Data)/4 // an image's base64 counts less
			blocks(b.Content)
		}
	}
	for _, m := range req.Messages {
		blocks(m.Content)
	}
	for _, t := range req.Tools {
		n += len(t.Name) + len(t.Description) + len(t.InputSchema)
	}
	return max(1, (n+3)/4)
}
