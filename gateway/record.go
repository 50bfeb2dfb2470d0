package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/reinsdev/reins/model"
)

// maxRecord bounds what of a forwarded answer is kept to build its record
// (a JSON body, one SSE event's data): past it, the answer still reaches
// the program whole but the record holds no content.
const maxRecord = MaxBody

// accumulator reads a forwarded answer as it streams past, for the record.
type accumulator interface {
	Write(p []byte)
	// result is the answer in reins' vocabulary and, when it is not
	// whole, what is missing.
	result() (*model.Response, string)
	// errorText is the provider's message of an error answer.
	errorText() string
	// ended reports whether the stream's last event (message_stop,
	// [DONE], response.completed) has been read: the answer is whole.
	ended() bool
}

func newAccumulator(wire Wire, sse bool) accumulator {
	if !sse {
		return &jsonAcc{wire: wire}
	}
	var h eventHandler
	switch wire {
	case WireAnthropic:
		h = &anthropicStream{}
	case WireOpenAIChat:
		h = &chatStream{}
	default:
		h = &responsesStream{}
	}
	return &sseAcc{h: h}
}

// jsonAcc keeps a JSON answer and decodes it at its end.
type jsonAcc struct {
	wire Wire
	buf  bytes.Buffer
	over bool
}

func (a *jsonAcc) Write(p []byte) {
	if a.over || a.buf.Len()+len(p) > maxRecord {
		a.over = true
		return
	}
	a.buf.Write(p)
}

func (a *jsonAcc) result() (*model.Response, string) {
	if a.over {
		return nil, fmt.Sprintf("the provider's answer passed the %d MiB the record keeps: the program got it whole, its record has no content", maxRecord>>20)
	}
	var r *model.Response
	var err error
	switch a.wire {
	case WireAnthropic:
		r, err = decodeMessage(a.buf.Bytes())
	case WireOpenAIChat:
		r, err = decodeChat(a.buf.Bytes())
	default:
		r, err = decodeResponse(a.buf.Bytes())
	}
	if err != nil {
		return nil, "the provider's answer did not decode: " + err.Error()
	}
	return r, ""
}

func (a *jsonAcc) errorText() string { return errorText(a.buf.Bytes()) }

// ended is false: a JSON answer is whole only once all of it is sent.
func (a *jsonAcc) ended() bool { return false }

// errorText is the message of a provider's error body (either wire's
// shape), else the body's start.
func errorText(b []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// eventHandler reads one wire's SSE events.
type eventHandler interface {
	event(name string, data []byte)
	result() (*model.Response, string)
	ended() bool
}

// sseAcc splits a stream into events for its handler.
type sseAcc struct {
	h     eventHandler
	line  []byte
	name  string
	data  []byte
	over  bool // the current event's data passed maxRecord
	start []byte
	// fed counts the event data given to h, which keeps the answer's
	// content: past maxRecord the stream still reaches the program whole
	// but h gets no more (the record is not kept).
	fed     int
	dropped bool
}

func (a *sseAcc) Write(p []byte) {
	if len(a.start) < 4096 {
		a.start = append(a.start, p[:min(len(p), 4096-len(a.start))]...)
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			a.add(p)
			return
		}
		a.add(p[:i])
		a.endLine()
		p = p[i+1:]
	}
}

func (a *sseAcc) add(p []byte) {
	if len(a.line)+len(a.data)+len(p) > maxRecord {
		a.over = true
		return
	}
	a.line = append(a.line, p...)
}

func (a *sseAcc) endLine() {
	line := bytes.TrimSuffix(a.line, []byte("\r"))
	a.line = a.line[:0]
	switch {
	case len(line) == 0:
		if a.fed += len(a.data); a.fed > maxRecord {
			a.dropped = true
		}
		if len(a.data) > 0 && !a.over && !a.dropped {
			a.h.event(a.name, a.data)
		}
		a.name, a.data, a.over = "", a.data[:0], false
	case bytes.HasPrefix(line, []byte("event:")):
		a.name = strings.TrimSpace(string(line[len("event:"):]))
	case bytes.HasPrefix(line, []byte("data:")):
		d := bytes.TrimPrefix(line[len("data:"):], []byte(" "))
		if len(a.data) > 0 {
			a.data = append(a.data, '\n')
		}
		a.data = append(a.data, d...)
	}
}

func (a *sseAcc) result() (*model.Response, string) {
	a.endLine() // a last event without its blank line
	a.endLine()
	if a.dropped {
		return nil, fmt.Sprintf("the provider's stream passed the %d MiB the record keeps: the program got it whole, its record has no content", maxRecord>>20)
	}
	return a.h.result()
}

func (a *sseAcc) errorText() string { return errorText(a.start) }

func (a *sseAcc) ended() bool { return a.h.ended() }

// --- Anthropic ---

type aUsage struct {
	InputTokens   int64 `json:"input_tokens"`
	OutputTokens  int64 `json:"output_tokens"`
	CacheRead     int64 `json:"cache_read_input_tokens"`
	CacheCreation int64 `json:"cache_creation_input_tokens"`
}

// merge takes the counts u reports (a message_delta repeats only some).
func (u aUsage) merge(into *model.Usage) {
	if u.InputTokens != 0 {
		into.InputTokens = u.InputTokens
	}
	if u.OutputTokens != 0 {
		into.OutputTokens = u.OutputTokens
	}
	if u.CacheRead != 0 {
		into.CacheReadTokens = u.CacheRead
	}
	if u.CacheCreation != 0 {
		into.CacheWriteTokens = u.CacheCreation
	}
}

func stopReason(s string) model.StopReason {
	switch s {
	case "tool_use", "tool_calls", "function_call":
		return model.StopToolUse
	case "max_tokens", "length", "max_output_tokens":
		return model.StopMaxTokens
	}
	return model.StopEndTurn
}

func decodeMessage(b []byte) (*model.Response, error) {
	var m struct {
		Content    []aBlock `json:"content"`
		StopReason string   `json:"stop_reason"`
		Usage      aUsage   `json:"usage"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	r := &model.Response{StopReason: stopReason(m.StopReason)}
	m.Usage.merge(&r.Usage)
	for _, c := range m.Content {
		switch c.Type {
		case "text":
			r.Content = append(r.Content, model.Block{Type: model.BlockText, Text: c.Text})
		case "tool_use":
			r.Content = append(r.Content, model.Block{Type: model.BlockToolUse, ToolCallID: c.ID, ToolName: c.Name, Input: c.Input})
		}
	}
	return r, nil
}

type anthropicStream struct {
	resp   model.Response
	blocks map[int]*streamBlock
	done   bool
	err    string
}

// streamBlock is a content block being streamed: its text or its
// arguments' JSON so far.
type streamBlock struct {
	kind     model.BlockType
	id, name string
	text     strings.Builder
}

func (s *anthropicStream) event(_ string, data []byte) {
	var e struct {
		Type    string `json:"type"`
		Index   int    `json:"index"`
		Message struct {
			Usage aUsage `json:"usage"`
		} `json:"message"`
		ContentBlock aBlock `json:"content_block"`
		Delta        struct {
			Type        string `json:"type"`
			Text        string `json:"text"`
			PartialJSON string `json:"partial_json"`
			StopReason  string `json:"stop_reason"`
		} `json:"delta"`
		Usage aUsage `json:"usage"`
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &e) != nil {
		return
	}
	if s.blocks == nil {
		s.blocks = map[int]*streamBlock{}
	}
	switch e.Type {
	case "message_start":
		e.Message.Usage.merge(&s.resp.Usage)
	case "content_block_start":
		switch e.ContentBlock.Type {
		case "text":
			b := &streamBlock{kind: model.BlockText}
			b.text.WriteString(e.ContentBlock.Text)
			s.blocks[e.Index] = b
		case "tool_use":
			s.blocks[e.Index] = &streamBlock{kind: model.BlockToolUse, id: e.ContentBlock.ID, name: e.ContentBlock.Name}
		}
	case "content_block_delta":
		if b := s.blocks[e.Index]; b != nil {
			b.text.WriteString(e.Delta.Text + e.Delta.PartialJSON)
		}
	case "message_delta":
		s.resp.StopReason = stopReason(e.Delta.StopReason)
		e.Usage.merge(&s.resp.Usage)
	case "message_stop":
		s.done = true
	case "error":
		s.err = "the provider's stream failed: " + e.Error.Message
	}
}

func (s *anthropicStream) ended() bool { return s.done }

func (s *anthropicStream) result() (*model.Response, string) {
	s.resp.Content = blocksInOrder(s.blocks)
	return &s.resp, incomplete(s.done, s.err, "message_stop")
}

func incomplete(done bool, err, end string) string {
	switch {
	case err != "":
		return err
	case !done:
		return "the provider's stream ended before its " + end
	}
	return ""
}

func blocksInOrder(m map[int]*streamBlock) []model.Block {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []model.Block
	for _, k := range keys {
		b := m[k]
		if b.kind == model.BlockText {
			out = append(out, model.Block{Type: model.BlockText, Text: b.text.String()})
		} else {
			out = append(out, toolUse(b.id, b.name, b.text.String()))
		}
	}
	return out
}

// --- OpenAI ---

// oUsage is either OpenAI API's usage: prompt tokens include the cached
// ones, which reins counts apart.
type oUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	PromptDetails    struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	InputDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
}

func (u oUsage) model() model.Usage {
	cached := u.PromptDetails.CachedTokens + u.InputDetails.CachedTokens
	return model.Usage{
		InputTokens:     u.PromptTokens + u.InputTokens - cached,
		OutputTokens:    u.CompletionTokens + u.OutputTokens,
		CacheReadTokens: cached,
	}
}

type chatToolCall struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func decodeChat(b []byte) (*model.Response, error) {
	var c struct {
		Choices []struct {
			Message struct {
				Content   *string        `json:"content"`
				ToolCalls []chatToolCall `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage *oUsage `json:"usage"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	r := &model.Response{StopReason: model.StopEndTurn}
	if c.Usage != nil {
		r.Usage = c.Usage.model()
	}
	if len(c.Choices) > 0 {
		ch := c.Choices[0]
		r.StopReason = stopReason(ch.FinishReason)
		if ch.Message.Content != nil && *ch.Message.Content != "" {
			r.Content = append(r.Content, model.Block{Type: model.BlockText, Text: *ch.Message.Content})
		}
		for _, t := range ch.Message.ToolCalls {
			r.Content = append(r.Content, toolUse(t.ID, t.Function.Name, t.Function.Arguments))
		}
	}
	return r, nil
}

type chatStream struct {
	resp  model.Response
	text  strings.Builder
	calls map[int]*streamBlock
	done  bool
}

func (s *chatStream) event(_ string, data []byte) {
	if string(data) == "[DONE]" {
		s.done = true
		return
	}
	var c struct {
		Choices []struct {
			Delta struct {
				Content   string         `json:"content"`
				ToolCalls []chatToolCall `json:"tool_calls"`
			} `json:"delta"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage *oUsage `json:"usage"`
	}
	if json.Unmarshal(data, &c) != nil {
		return
	}
	if s.calls == nil {
		s.calls = map[int]*streamBlock{}
	}
	if c.Usage != nil {
		s.resp.Usage = c.Usage.model()
	}
	for _, ch := range c.Choices {
		s.text.WriteString(ch.Delta.Content)
		for _, t := range ch.Delta.ToolCalls {
			b := s.calls[t.Index]
			if b == nil {
				b = &streamBlock{kind: model.BlockToolUse}
				s.calls[t.Index] = b
			}
			if t.ID != "" {
				b.id = t.ID
			}
			b.name += t.Function.Name
			b.text.WriteString(t.Function.Arguments)
		}
		if ch.FinishReason != "" {
			s.resp.StopReason = stopReason(ch.FinishReason)
		}
	}
}

func (s *chatStream) ended() bool { return s.done }

func (s *chatStream) result() (*model.Response, string) {
	s.resp.Content = nil
	if s.text.Len() > 0 {
		s.resp.Content = []model.Block{{Type: model.BlockText, Text: s.text.String()}}
	}
	s.resp.Content = append(s.resp.Content, blocksInOrder(s.calls)...)
	if s.resp.StopReason == "" {
		s.resp.StopReason = model.StopEndTurn
	}
	return &s.resp, incomplete(s.done, "", "[DONE]")
}

type responseItem struct {
	Type    string `json:"type"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type responseObj struct {
	Status            string `json:"status"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Output []responseItem `json:"output"`
	Usage  *oUsage        `json:"usage"`
}

func (o *responseObj) model() *model.Response {
	r := &model.Response{StopReason: model.StopEndTurn}
	if o.Usage != nil {
		r.Usage = o.Usage.model()
	}
	for _, it := range o.Output {
		switch it.Type {
		case "message":
			for _, c := range it.Content {
				if c.Type == "output_text" {
					r.Content = append(r.Content, model.Block{Type: model.BlockText, Text: c.Text})
				}
			}
		case "function_call":
			r.Content = append(r.Content, toolUse(it.CallID, it.Name, it.Arguments))
			r.StopReason = model.StopToolUse
		}
	}
	if o.IncompleteDetails != nil && o.IncompleteDetails.Reason == "max_output_tokens" {
		r.StopReason = model.StopMaxTokens
	}
	return r
}

func decodeResponse(b []byte) (*model.Response, error) {
	var o responseObj
	if err := json.Unmarshal(b, &o); err != nil {
		return nil, err
	}
	return o.model(), nil
}

type responsesStream struct {
	final *responseObj
	items []responseItem // output_item.done, for a final response that lists none
	err   string
}

func (s *responsesStream) event(_ string, data []byte) {
	var e struct {
		Type     string       `json:"type"`
		Response responseObj  `json:"response"`
		Item     responseItem `json:"item"`
		Message  string       `json:"message"`
	}
	if json.Unmarshal(data, &e) != nil {
		return
	}
	switch e.Type {
	case "response.output_item.done":
		s.items = append(s.items, e.Item)
	case "response.completed", "response.incomplete":
		s.final = &e.Response
	case "response.failed":
		s.final = &e.Response
		s.err = "the provider's response failed"
	case "error":
		s.err = "the provider's stream failed: " + e.Message
	}
}

func (s *responsesStream) ended() bool { return s.final != nil }

func (s *responsesStream) result() (*model.Response, string) {
	if s.final == nil {
		o := responseObj{Output: s.items}
		return o.model(), incomplete(false, s.err, "response.completed")
	}
	if len(s.final.Output) == 0 {
		s.final.Output = s.items
	}
	return s.final.model(), s.err
}
