package openai

import (
	"encoding/json"
	"fmt"
	"strings"

	sdk "github.com/openai/openai-go/v3"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/model"
)

// params translates a request to the SDK's.
func (m *Model) params(req *model.Request) (sdk.ChatCompletionNewParams, error) {
	name := req.Model
	if name == "" {
		name = m.cfg.Model
	}
	if name == "" {
		return sdk.ChatCompletionNewParams{}, errdefs.WithMessage(errdefs.ErrInvalidArgument, "openai: no model named: use openai:MODEL, e.g. openai:gpt-4.1")
	}
	p := sdk.ChatCompletionNewParams{Model: sdk.ChatModel(name)}
	maxTokens := req.MaxTokens
	if maxTokens <= 0 {
		maxTokens = m.cfg.MaxTokens
	}
	switch {
	case maxTokens <= 0:
	case m.official:
		p.MaxCompletionTokens = sdk.Int(int64(maxTokens))
	default:
		p.MaxTokens = sdk.Int(int64(maxTokens))
	}
	if req.System != "" {
		p.Messages = append(p.Messages, sdk.ChatCompletionMessageParamUnion{OfSystem: &sdk.ChatCompletionSystemMessageParam{
			Content: sdk.ChatCompletionSystemMessageParamContentUnion{OfString: sdk.String(req.System)},
		}})
	}
	for _, t := range req.Tools {
		tp, err := tool(t)
		if err != nil {
			return sdk.ChatCompletionNewParams{}, err
		}
		p.Tools = append(p.Tools, tp)
	}
	for i, msg := range req.Messages {
		var mps []sdk.ChatCompletionMessageParamUnion
		var err error
		switch msg.Role {
		case model.RoleUser:
			mps, err = userMessages(msg.Content)
		case model.RoleAssistant:
			mps, err = assistantMessage(msg.Content)
		default:
			err = fmt.Errorf("unknown role %q: %w", msg.Role, errdefs.ErrInvalidArgument)
		}
		if err != nil {
			return sdk.ChatCompletionNewParams{}, fmt.Errorf("openai: message %d: %w", i, err)
		}
		p.Messages = append(p.Messages, mps...)
	}
	return p, nil
}

func tool(t model.ToolSpec) (sdk.ChatCompletionToolUnionParam, error) {
	var schema map[string]any
	if len(t.InputSchema) > 0 {
		if err := json.Unmarshal(t.InputSchema, &schema); err != nil {
			return sdk.ChatCompletionToolUnionParam{}, fmt.Errorf("openai: tool %q: input schema is not a JSON object: %v: %w", t.Name, err, errdefs.ErrInvalidArgument)
		}
	}
	fn := sdk.FunctionDefinitionParam{Name: t.Name, Parameters: schema}
	if t.Description != "" {
		fn.Description = sdk.String(t.Description)
	}
	return sdk.ChatCompletionToolUnionParam{OfFunction: &sdk.ChatCompletionFunctionToolParam{Function: fn}}, nil
}

// userMessages translates a user turn: its tool results become "tool"
// messages, which must come first, right after the assistant's calls; its
// text and images, and the images the tool results carried, follow in one
// user message.
func userMessages(blocks []model.Block) ([]sdk.ChatCompletionMessageParamUnion, error) {
	var out []sdk.ChatCompletionMessageParamUnion
	var parts []sdk.ChatCompletionContentPartUnionParam
	for _, b := range blocks {
		switch b.Type {
		case model.BlockText:
			if b.Text != "" {
				parts = append(parts, textPart(b.Text))
			}
		case model.BlockImage:
			parts = append(parts, imagePart(b))
		case model.BlockToolResult:
			text, images := toolResult(b)
			out = append(out, sdk.ChatCompletionMessageParamUnion{OfTool: &sdk.ChatCompletionToolMessageParam{
				ToolCallID: b.ToolCallID,
				Content:    sdk.ChatCompletionToolMessageParamContentUnion{OfString: sdk.String(text)},
			}})
			if len(images) > 0 {
				parts = append(parts, textPart(fmt.Sprintf("The result of tool call %s included %s:", b.ToolCallID, plural(len(images), "image"))))
				parts = append(parts, images...)
			}
		default:
			return nil, fmt.Errorf("a %s block in a user message: %w", b.Type, errdefs.ErrInvalidArgument)
		}
	}
	if len(parts) > 0 {
		out = append(out, sdk.ChatCompletionMessageParamUnion{OfUser: &sdk.ChatCompletionUserMessageParam{Content: userContent(parts)}})
	}
	return out, nil
}

// userContent is text alone as a plain string, which every server takes
// (some local ones take nothing else), and content parts otherwise.
func userContent(parts []sdk.ChatCompletionContentPartUnionParam) sdk.ChatCompletionUserMessageParamContentUnion {
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		if p.OfText == nil {
			return sdk.ChatCompletionUserMessageParamContentUnion{OfArrayOfContentParts: parts}
		}
		texts = append(texts, p.OfText.Text)
	}
	return sdk.ChatCompletionUserMessageParamContentUnion{OfString: sdk.String(strings.Join(texts, "\n\n"))}
}

// toolResult is a tool result's text (tool messages have no error flag, so
// an error says so in words) and its images as content parts.
func toolResult(b model.Block) (string, []sdk.ChatCompletionContentPartUnionParam) {
	texts := []string{}
	if b.Text != "" {
		texts = append(texts, b.Text)
	}
	var images []sdk.ChatCompletionContentPartUnionParam
	for _, c := range b.Content {
		switch c.Type {
		case model.BlockText:
			if c.Text != "" {
				texts = append(texts, c.Text)
			}
		case model.BlockImage:
			images = append(images, imagePart(c))
		}
	}
	text := strings.Join(texts, "\n")
	if b.IsError {
		text = "Error: " + text
	}
	return text, images
}

func textPart(s string) sdk.ChatCompletionContentPartUnionParam {
	return sdk.ChatCompletionContentPartUnionParam{OfText: &sdk.ChatCompletionContentPartTextParam{Text: s}}
}

func imagePart(b model.Block) sdk.ChatCompletionContentPartUnionParam {
	return sdk.ChatCompletionContentPartUnionParam{OfImageURL: &sdk.ChatCompletionContentPartImageParam{
		ImageURL: sdk.ChatCompletionContentPartImageImageURLParam{URL: "data:" + b.MediaType + ";base64," + b.Data},
	}}
}

func plural(n int, s string) string {
	if n == 1 {
		return "an " + s
	}
	return fmt.Sprintf("%d %ss", n, s)
}

func assistantMessage(blocks []model.Block) ([]sdk.ChatCompletionMessageParamUnion, error) {
	a := &sdk.ChatCompletionAssistantMessageParam{}
	var texts []string
	for _, b := range blocks {
		switch b.Type {
		case model.BlockText:
			if b.Text != "" {
				texts = append(texts, b.Text)
			}
		case model.BlockToolUse:
			a.ToolCalls = append(a.ToolCalls, sdk.ChatCompletionMessageToolCallUnionParam{OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
				ID:       b.ToolCallID,
				Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{Name: b.ToolName, Arguments: arguments(b)},
			}})
		default:
			return nil, fmt.Errorf("a %s block in an assistant message: %w", b.Type, errdefs.ErrInvalidArgument)
		}
	}
	if len(texts) == 0 && len(a.ToolCalls) == 0 {
		return nil, nil
	}
	if len(texts) > 0 {
		a.Content.OfString = sdk.String(strings.Join(texts, "\n\n"))
	}
	return []sdk.ChatCompletionMessageParamUnion{{OfAssistant: a}}, nil
}

// arguments is a call's arguments as the model wrote them: the JSON object,
// or, for a call with an InputError, the raw text that Input quotes.
func arguments(b model.Block) string {
	if b.InputError != "" {
		var raw string
		if json.Unmarshal(b.Input, &raw) == nil {
			return raw
		}
	}
	if len(b.Input) == 0 {
		return "{}"
	}
	return string(b.Input)
}

// response translates the API's answer; it reads the first choice.
func response(cc *sdk.ChatCompletion) (*model.Response, error) {
	if len(cc.Choices) == 0 {
		return nil, fmt.Errorf("openai: the response has no choices: %w", errdefs.ErrUnavailable)
	}
	u := cc.Usage
	cached, written := u.PromptTokensDetails.CachedTokens, u.PromptTokensDetails.CacheWriteTokens
	r := &model.Response{Usage: model.Usage{
		InputTokens:      max(u.PromptTokens-cached-written, 0),
		OutputTokens:     u.CompletionTokens,
		CacheReadTokens:  cached,
		CacheWriteTokens: written,
	}}
	c := cc.Choices[0]
	if c.Message.Content != "" {
		r.Content = append(r.Content, model.Block{Type: model.BlockText, Text: c.Message.Content})
	}
	if c.Message.Refusal != "" {
		r.Content = append(r.Content, model.Block{Type: model.BlockText, Text: c.Message.Refusal})
	}
	for i, tc := range c.Message.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			continue // custom tools are never offered
		}
		id := tc.ID
		if id == "" { // some local servers leave it out
			id = fmt.Sprintf("call_%d", i)
		}
		input, inputErr := toolInput(tc.Function.Arguments)
		r.Content = append(r.Content, model.Block{
			Type: model.BlockToolUse, ToolCallID: id, ToolName: tc.Function.Name,
			Input: input, InputError: inputErr,
		})
	}
	switch c.FinishReason {
	case "length":
		r.StopReason = model.StopMaxTokens
	case "tool_calls", "function_call":
		r.StopReason = model.StopToolUse
	default:
		r.StopReason = model.StopEndTurn
	}
	// Some servers say "stop" after calling tools.
	if r.StopReason == model.StopEndTurn && len(c.Message.ToolCalls) > 0 {
		r.StopReason = model.StopToolUse
	}
	return r, nil
}

// toolInput checks a call's arguments. Valid ones are returned as they
// are; others are quoted as a JSON string with a note saying what is wrong
// (see model.Block.InputError). Empty arguments are an empty object, as
// models send for tools without parameters.
func toolInput(args string) (json.RawMessage, string) {
	trimmed := strings.TrimSpace(args)
	if trimmed == "" {
		return json.RawMessage("{}"), ""
	}
	var v any
	err := json.Unmarshal([]byte(trimmed), &v)
	if _, isObject := v.(map[string]any); err == nil && isObject {
		return json.RawMessage(trimmed), ""
	}
	quoted, _ := json.Marshal(args)
	if err != nil {
		return quoted, fmt.Sprintf("the arguments are not valid JSON: %v", err)
	}
	return quoted, fmt.Sprintf("the arguments must be a JSON object, not %s", jsonKind(v))
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "an array"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "something else"
}
