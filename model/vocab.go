// This file is the brain's vocabulary: what a model provider implements and
// the conversation it is given. The loop (package agent) and every provider
// import it; it imports nothing of reins but errdefs and retry (the
// dependency fence in model_test.go holds that).

package model

import (
	"context"
	"encoding/json"
)

// Role is who said a message.
type Role string

const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
)

// BlockType is the kind of a content block.
type BlockType string

const (
	BlockText       BlockType = "text"
	BlockToolUse    BlockType = "tool_use"
	BlockToolResult BlockType = "tool_result"
	BlockImage      BlockType = "image"
)

// Block is one piece of a message: text, a tool call (assistant), a tool
// result (user), or an image (in a tool result or a user message).
type Block struct {
	Type BlockType `json:"type"`
	Text string    `json:"text,omitempty"`
	// Tool calls and results share the call's id.
	ToolCallID string          `json:"tool_call_id,omitempty"`
	ToolName   string          `json:"tool_name,omitempty"`
	Input      json.RawMessage `json:"input,omitempty"` // tool_use: the arguments object
	// InputError is set on a tool_use block whose arguments, as the model
	// sent them, are not a JSON object. Input then holds the raw text as a
	// JSON string, so the block still round-trips to the provider as the
	// model wrote it. The loop must not run the tool: it answers with an
	// error tool result that quotes InputError and the tool's schema, and
	// the run goes on.
	InputError string `json:"input_error,omitempty"`
	IsError    bool   `json:"is_error,omitempty"`
	// Images: base64 data and its media type ("image/png").
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	// Digest, on an image the loop keeps by reference (a screenshot in
	// its blob store), names the blob; the loop loads it into Data, or
	// puts a text block in its place, before a request: a provider never
	// sees a Digest without Data.
	Digest string `json:"digest,omitempty"`
	// Blocks of a tool result other than its Text (e.g. a screenshot).
	Content []Block `json:"content,omitempty"`
}

// Message is one turn of the conversation.
type Message struct {
	Role    Role    `json:"role"`
	Content []Block `json:"content"`
}

// ToolSpec describes a tool to the model.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"` // a JSON Schema object
	// Computer, when set, says the tool is the computer-use tool (a
	// screen, a mouse and a keyboard, with the action set and input
	// schema of Anthropic's) over a display of this size, as the model
	// sees it. A provider with a native computer tool sends that in
	// place of the schema; others send the schema.
	Computer *ComputerDisplay `json:"computer,omitempty"`
}

// ComputerDisplay is the size of the screen a model sees, in pixels.
type ComputerDisplay struct {
	Width  int `json:"width"`
	Height int `json:"height"`
}

// Request is one call to a model.
type Request struct {
	Model     string     `json:"model"` // the provider's model name, e.g. "claude-sonnet-4-5"
	System    string     `json:"system,omitempty"`
	Messages  []Message  `json:"messages"`
	Tools     []ToolSpec `json:"tools,omitempty"`
	MaxTokens int        `json:"max_tokens,omitempty"`
}

// StopReason says why the model stopped.
type StopReason string

const (
	StopEndTurn   StopReason = "end_turn"   // a final answer
	StopToolUse   StopReason = "tool_use"   // it called tools
	StopMaxTokens StopReason = "max_tokens" // cut off
)

// Usage is what a call consumed, as the provider reports it. The four
// counts are disjoint: InputTokens are the prompt tokens neither read from
// nor written to the provider's cache, so the whole prompt is
// InputTokens+CacheReadTokens+CacheWriteTokens and each count has its own
// price.
type Usage struct {
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
}

// Total counts every token, cached ones included.
func (u Usage) Total() int64 {
	return u.InputTokens + u.OutputTokens + u.CacheReadTokens + u.CacheWriteTokens
}

// Add returns the sum of two usages.
func (u Usage) Add(o Usage) Usage {
	return Usage{u.InputTokens + o.InputTokens, u.OutputTokens + o.OutputTokens,
		u.CacheReadTokens + o.CacheReadTokens, u.CacheWriteTokens + o.CacheWriteTokens}
}

// Response is a model's answer: text and tool calls (Type text / tool_use).
type Response struct {
	Content    []Block    `json:"content"`
	StopReason StopReason `json:"stop_reason"`
	Usage      Usage      `json:"usage"`
}

// Model is a language model behind one provider. Generate retries what is
// worth retrying (429, 5xx, dropped connections) with backoff, honouring
// ctx; the error it returns is final and says what happened (a missing key
// names its variable; a refused request quotes the provider's message).
type Model interface {
	Generate(ctx context.Context, req *Request) (*Response, error)
}
