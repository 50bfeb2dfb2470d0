package anthropic

import (
	"encoding/json"
	"fmt"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/model"
)

// cachedUserTurns is how many of the last user turns carry a breakpoint;
// with the tools and the system prompt that makes the API's limit of four.
const cachedUserTurns = 2

// params translates a request to the SDK's.
func (m *Model) params(req *model.Request) (sdk.MessageNewParams, error) {
	name := req.Model
	if name == "" {
		name = m.cfg.Model
	}
	if name == "" {
		return sdk.MessageNewParams{}, errdefs.WithMessage(errdefs.ErrInvalidArgument, "anthropic: no model named: use anthropic:MODEL, e.g. anthropic:claude-sonnet-4-5")
	}
	maxTokens := req.MaxTokens
	if maxTokens <= 0 {
		maxTokens = m.cfg.MaxTokens
	}
	p := sdk.MessageNewParams{Model: sdk.Model(name), MaxTokens: int64(maxTokens)}
	if req.System != "" {
		p.System = []sdk.TextBlockParam{{Text: req.System, CacheControl: sdk.NewCacheControlEphemeralParam()}}
	}
	for i, t := range req.Tools {
		if t.Computer != nil {
			// A stand-in the Beta request replaces (native.go).
			p.Tools = append(p.Tools, sdk.ToolUnionParam{OfTool: &sdk.ToolParam{Name: t.Name}})
			continue
		}
		tp, err := tool(t)
		if err != nil {
			return sdk.MessageNewParams{}, err
		}
		if i == len(req.Tools)-1 {
			tp.CacheControl = sdk.NewCacheControlEphemeralParam()
		}
		p.Tools = append(p.Tools, sdk.ToolUnionParam{OfTool: &tp})
	}
	for i, msg := range req.Messages {
		mp, ok, err := message(msg)
		if err != nil {
			return sdk.MessageNewParams{}, fmt.Errorf("anthropic: message %d: %w", i, err)
		}
		if ok {
			p.Messages = append(p.Messages, mp)
		}
	}
	markUserTurns(p.Messages, cachedUserTurns)
	return p, nil
}

// markUserTurns puts a cache breakpoint on the last block of the last n
// user turns.
func markUserTurns(msgs []sdk.MessageParam, n int) {
	for i := len(msgs) - 1; i >= 0 && n > 0; i-- {
		u := msgs[i].OfUser
		if u == nil || len(u.Content) == 0 {
			continue
		}
		if cc := u.Content[len(u.Content)-1].GetCacheControl(); cc != nil {
			*cc = sdk.NewCacheControlEphemeralParam()
			n--
		}
	}
}

// tool translates a tool's spec; its schema must be a JSON object.
func tool(t model.ToolSpec) (sdk.ToolParam, error) {
	var schema map[string]any
	if len(t.InputSchema) > 0 {
		if err := json.Unmarshal(t.InputSchema, &schema); err != nil {
			return sdk.ToolParam{}, fmt.Errorf("anthropic: tool %q: input schema is not a JSON object: %v: %w", t.Name, err, errdefs.ErrInvalidArgument)
		}
	}
	var in sdk.ToolInputSchemaParam
	for k, v := range schema {
		switch k {
		case "type":
		case "properties":
			in.Properties = v
		case "required":
			for _, r := range asSlice(v) {
				if s, ok := r.(string); ok {
					in.Required = append(in.Required, s)
				}
			}
		default:
			if in.ExtraFields == nil {
				in.ExtraFields = map[string]any{}
			}
			in.ExtraFields[k] = v
		}
	}
	tp := sdk.ToolParam{Name: t.Name, InputSchema: in}
	if t.Description != "" {
		tp.Description = sdk.String(t.Description)
	}
	return tp, nil
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// message translates one message. Empty text blocks are dropped (the API
// refuses them) and so is a message left with no blocks (the API merges the
// neighbours it leaves side by side).
func message(msg model.Message) (sdk.MessageParam, bool, error) {
	var blocks []sdk.ContentBlockParamUnion
	for _, b := range msg.Content {
		cb, ok, err := block(msg.Role, b)
		if err != nil {
			return sdk.MessageParam{}, false, err
		}
		if ok {
			blocks = append(blocks, cb)
		}
	}
	if len(blocks) == 0 {
		return sdk.MessageParam{}, false, nil
	}
	switch msg.Role {
	case model.RoleUser:
		return sdk.MessageParam{OfUser: &sdk.UserMessageParam{Content: blocks}}, true, nil
	case model.RoleAssistant:
		return sdk.MessageParam{OfAssistant: &sdk.AssistantMessageParam{Content: blocks}}, true, nil
	}
	return sdk.MessageParam{}, false, fmt.Errorf("unknown role %q: %w", msg.Role, errdefs.ErrInvalidArgument)
}

func block(role model.Role, b model.Block) (sdk.ContentBlockParamUnion, bool, error) {
	switch {
	case b.Type == model.BlockText:
		if b.Text == "" {
			return sdk.ContentBlockParamUnion{}, false, nil
		}
		return sdk.ContentBlockParamUnion{OfText: &sdk.TextBlockParam{Text: b.Text}}, true, nil
	case b.Type == model.BlockImage:
		return sdk.ContentBlockParamUnion{OfImage: image(b)}, true, nil
	case b.Type == model.BlockToolUse && role == model.RoleAssistant:
		return sdk.ContentBlockParamUnion{OfToolUse: &sdk.ToolUseBlockParam{
			ID: b.ToolCallID, Name: b.ToolName, Input: toolInput(b),
		}}, true, nil
	case b.Type == model.BlockToolResult && role == model.RoleUser:
		return sdk.ContentBlockParamUnion{OfToolResult: toolResult(b)}, true, nil
	}
	return sdk.ContentBlockParamUnion{}, false, fmt.Errorf("a %s block in a %s message: %w", b.Type, role, errdefs.ErrInvalidArgument)
}

// toolInput is a call's arguments object. A call whose arguments were not
// an object (see model.Block.InputError; another provider's model made
// it) is replayed with none: the API takes only objects, and the result
// that follows tells the model what went wrong.
func toolInput(b model.Block) json.RawMessage {
	var obj map[string]json.RawMessage
	if b.InputError != "" || json.Unmarshal(b.Input, &obj) != nil || obj == nil {
		return json.RawMessage("{}")
	}
	return b.Input
}

func image(b model.Block) *sdk.ImageBlockParam {
	return &sdk.ImageBlockParam{Source: sdk.ImageBlockParamSourceUnion{
		OfBase64: &sdk.Base64ImageSourceParam{Data: b.Data, MediaType: sdk.Base64ImageSourceMediaType(b.MediaType)},
	}}
}

func toolResult(b model.Block) *sdk.ToolResultBlockParam {
	r := &sdk.ToolResultBlockParam{ToolUseID: b.ToolCallID}
	if b.IsError {
		r.IsError = sdk.Bool(true)
	}
	if b.Text != "" {
		r.Content = append(r.Content, sdk.ToolResultBlockParamContentUnion{OfText: &sdk.TextBlockParam{Text: b.Text}})
	}
	for _, c := range b.Content {
		switch {
		case c.Type == model.BlockText && c.Text != "":
			r.Content = append(r.Content, sdk.ToolResultBlockParamContentUnion{OfText: &sdk.TextBlockParam{Text: c.Text}})
		case c.Type == model.BlockImage:
			r.Content = append(r.Content, sdk.ToolResultBlockParamContentUnion{OfImage: image(c)})
		}
	}
	return r
}

// response translates the API's answer. Blocks other than text and tool
// calls (thinking, server tools) are not part of model.Response and are
// left out.
func response(msg *sdk.Message) *model.Response {
	r := &model.Response{Usage: model.Usage{
		InputTokens:      msg.Usage.InputTokens,
		OutputTokens:     msg.Usage.OutputTokens,
		CacheReadTokens:  msg.Usage.CacheReadInputTokens,
		CacheWriteTokens: msg.Usage.CacheCreationInputTokens,
	}}
	calls := false
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			r.Content = append(r.Content, model.Block{Type: model.BlockText, Text: b.Text})
		case "tool_use":
			input := b.Input
			if len(input) == 0 || string(input) == "null" {
				input = json.RawMessage("{}")
			}
			r.Content = append(r.Content, model.Block{Type: model.BlockToolUse, ToolCallID: b.ID, ToolName: b.Name, Input: input})
			calls = true
		}
	}
	switch msg.StopReason {
	case sdk.StopReasonMaxTokens, sdk.StopReasonModelContextWindowExceeded:
		r.StopReason = model.StopMaxTokens
	case sdk.StopReasonToolUse:
		r.StopReason = model.StopToolUse
	default:
		r.StopReason = model.StopEndTurn
	}
	if calls && r.StopReason == model.StopEndTurn {
		r.StopReason = model.StopToolUse
	}
	return r
}
