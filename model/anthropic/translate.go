package anthropic

import (
	"encoding/json"
	"fmt"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/reinsdev/reins/agent"
	"github.com/reinsdev/reins/errdefs"
)

// cachedUserTurns is how many of the last user turns carry a breakpoint;
// with the tools and the system prompt that makes the API's limit of four.
const cachedUserTurns = 2

// params translates a request to the SDK's.
func (m *Model) params(req *agent.Request) (sdk.MessageNewParams, error) {
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
func tool(t agent.ToolSpec) (sdk.ToolParam, error) {
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
func message(msg agent.Message) (sdk.MessageParam, bool, error) {
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
	case agent.RoleUser:
		return sdk.MessageParam{OfUser: &sdk.UserMessageParam{Content: blocks}}, true, nil
	case agent.RoleAssistant:
		return sdk.MessageParam{OfAssistant: &sdk.AssistantMessageParam{Content: blocks}}, true, nil
	}
	return sdk.MessageParam{}, false, fmt.Errorf("unknown role %q: %w", msg.Role, errdefs.ErrInvalidArgument)
}

func block(role agent.Role, b agent.Block) (sdk.ContentBlockParamUnion, bool, error) {
	switch {
	case b.Type == agent.BlockText:
		if b.Text == "" {
			return sdk.ContentBlockParamUnion{}, false, nil
		}
		return sdk.ContentBlockParamUnion{OfText: &sdk.TextBlockParam{Text: b.Text}}, true, nil
	case b.Type == agent.BlockImage:
		return sdk.ContentBlockParamUnion{OfImage: image(b)}, true, nil
	case b.Type == agent.BlockToolUse && role == agent.RoleAssistant:
		return sdk.ContentBlockParamUnion{OfToolUse: &sdk.ToolUseBlockParam{
			ID: b.ToolCallID, Name: b.ToolName, Input: toolInput(b),
		}}, true, nil
	case b.Type == agent.BlockToolResult && role == agent.RoleUser:
		return sdk.ContentBlockParamUnion{OfToolResult: toolResult(b)}, true, nil
	}
	return sdk.ContentBlockParamUnion{}, false, fmt.Errorf("a %s block in a %s message: %w", b.Type, role, errdefs.ErrInvalidArgument)
}

// toolInput is a call's arguments object. A call whose arguments were not
// an object (see agent.Block.InputError; another provider's model made
// it) is replayed with none: the API takes only objects, and the result
// that follows tells the model what went wrong.
func toolInput(b agent.Block) json.RawMessage {
	var obj map[string]json.RawMessage
	if b.InputError != "" || json.Unmarshal(b.Input, &obj) != nil || obj == nil {
		return json.RawMessage("{}")
	}
	return b.Input
}

func image(b agent.Block) *sdk.ImageBlockParam {
	return &sdk.ImageBlockParam{Source: sdk.ImageBlockParamSourceUnion{
		OfBase64: &sdk.Base64ImageSourceParam{Data: b.Data, MediaType: sdk.Base64ImageSourceMediaType(b.MediaType)},
	}}
}

func toolResult(b agent.Block) *sdk.ToolResultBlockParam {
	r := &sdk.ToolResultBlockParam{ToolUseID: b.ToolCallID}
	if b.IsError {
		r.IsError = sdk.Bool(true)
	}
	if b.Text != "" {
		r.Content = append(r.Content, sdk.ToolResultBlockParamContentUnion{OfText: &sdk.TextBlockParam{Text: b.Text}})
	}
	for _, c := range b.Content {
		switch {
		case c.Type == agent.BlockText && c.Text != "":
			r.Content = append(r.Content, sdk.ToolResultBlockParamContentUnion{OfText: &sdk.TextBlockParam{Text: c.Text}})
		case c.Type == agent.BlockImage:
			r.Content = append(r.Content, sdk.ToolResultBlockParamContentUnion{OfImage: image(c)})
		}
	}
	return r
}

// response translates the API's answer. Blocks other than text and tool
// calls (thinking, server tools) are not part of agent.Response and are
// left out.
func response(msg *sdk.Message) *agent.Response {
	r := &agent.Response{Usage: agent.Usage{
		InputTokens:      msg.Usage.InputTokens,
		OutputTokens:     msg.Usage.OutputTokens,
		CacheReadTokens:  msg.Usage.CacheReadInputTokens,
		CacheWriteTokens: msg.Usage.CacheCreationInputTokens,
	}}
	calls := false
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			r.Content = append(r.Content, agent.Block{Type: agent.BlockText, Text: b.Text})
		case "tool_use":
			input := b.Input
			if len(input) == 0 || string(input) == "null" {
				input = json.RawMessage("{}")
			}
			r.Content = append(r.Content, agent.Block{Type: agent.BlockToolUse, ToolCallID: b.ID, ToolName: b.Name, Input: input})
			calls = true
		}
	}
	switch msg.StopReason {
	case sdk.StopReasonMaxTokens, sdk.StopReasonModelContextWindowExceeded:
		r.StopReason = agent.StopMaxTokens
	case sdk.StopReasonToolUse:
		r.StopReason = agent.StopToolUse
	default:
		r.StopReason = agent.StopEndTurn
	}
	if calls && r.StopReason == agent.StopEndTurn {
		r.StopReason = agent.StopToolUse
	}
	return r
}
