package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/reinsdev/reins/model"
)

// render writes a model's answer back in the call's wire: a JSON body, or
// an SSE stream synthesized from it when the call asked to stream.
func render(w *recorder, wire Wire, p *parsed, r *model.Response) error {
	if !p.stream {
		var v any
		switch wire {
		case WireAnthropic:
			v = anthropicMessage(p.model, id("msg_"), r)
		case WireOpenAIChat:
			v = chatCompletion(p.model, id("chatcmpl-"), r)
		default:
			v = responseObject(p.model, id("resp_"), "completed", r)
		}
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, err = w.Write(b)
		return err
	}
	st := newStream(w, wire, p)
	st.finish(r)
	return st.err
}

// stream is an SSE answer synthesized in the call's wire. It may be
// opened (its headers and the wire's opening events sent) before the
// answer is known, then kept alive with pings while the model works, and
// ends with the answer (finish) or an error event (fail). Every event is
// flushed; the first write error is kept and ends the writing.
type stream struct {
	w       *recorder
	wire    Wire
	p       *parsed
	id      string
	created int64
	opened  bool
	seq     int
	err     error
}

func newStream(w *recorder, wire Wire, p *parsed) *stream {
	prefix := map[Wire]string{WireAnthropic: "msg_", WireOpenAIChat: "chatcmpl-", WireOpenAIResponses: "resp_"}[wire]
	return &stream{w: w, wire: wire, p: p, id: id(prefix), created: time.Now().Unix()}
}

func (s *stream) send(event string, v any) {
	if s.err != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		s.err = err
		return
	}
	if event != "" {
		_, s.err = fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, b)
	} else {
		_, s.err = fmt.Fprintf(s.w, "data: %s\n\n", b)
	}
	s.w.Flush()
}

// event sends a Responses event, numbered.
func (s *stream) event(typ string, fields map[string]any) {
	fields["type"] = typ
	fields["sequence_number"] = s.seq
	s.seq++
	s.send(typ, fields)
}

// open sends the headers and the wire's opening events, once; usage is
// what is known of the prompt's (Anthropic's message_start carries it).
func (s *stream) open(u model.Usage) {
	if s.opened {
		return
	}
	s.opened = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	s.w.WriteHeader(http.StatusOK)
	switch s.wire {
	case WireAnthropic:
		start := anthropicMessage(s.p.model, s.id, &model.Response{Usage: u})
		start["stop_reason"] = nil
		usage := anthropicUsage(u)
		usage["output_tokens"] = 0
		start["usage"] = usage
		s.send("message_start", map[string]any{"type": "message_start", "message": start})
	case WireOpenAIChat:
		s.send("", s.chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	default:
		o := responseObject(s.p.model, s.id, "in_progress", nil)
		s.event("response.created", map[string]any{"response": o})
		s.event("response.in_progress", map[string]any{"response": o})
	}
}

// ping keeps an opened stream alive: Anthropic's ping event, an SSE
// comment for OpenAI's wires (every SSE reader skips it).
func (s *stream) ping() {
	if s.err != nil {
		return
	}
	if s.wire == WireAnthropic {
		s.send("ping", map[string]string{"type": "ping"})
		return
	}
	_, s.err = fmt.Fprint(s.w, ": keep-alive\n\n")
	s.w.Flush()
}

// finish sends the answer and the stream's end.
func (s *stream) finish(r *model.Response) {
	s.open(r.Usage)
	switch s.wire {
	case WireAnthropic:
		s.finishAnthropic(r)
	case WireOpenAIChat:
		s.finishChat(r)
	default:
		s.finishResponses(r)
	}
}

// fail ends an opened stream with an error in the wire's form: the
// status can no longer change.
func (s *stream) fail(status int, typ, msg string) {
	switch s.wire {
	case WireAnthropic:
		s.send("error", map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
	case WireOpenAIChat:
		s.send("", map[string]any{"error": map[string]any{"message": msg, "type": openAIType(status, typ), "code": typ, "param": nil}})
	default:
		o := responseObject(s.p.model, s.id, "failed", nil)
		o["error"] = map[string]string{"code": typ, "message": msg}
		s.event("response.failed", map[string]any{"response": o})
	}
}

// --- Anthropic ---

func anthropicUsage(u model.Usage) map[string]int64 {
	return map[string]int64{
		"input_tokens": u.InputTokens, "output_tokens": u.OutputTokens,
		"cache_read_input_tokens": u.CacheReadTokens, "cache_creation_input_tokens": u.CacheWriteTokens,
	}
}

func anthropicBlock(b model.Block) map[string]any {
	if b.Type == model.BlockToolUse {
		return map[string]any{"type": "tool_use", "id": b.ToolCallID, "name": b.ToolName, "input": toolInput(b)}
	}
	return map[string]any{"type": "text", "text": b.Text}
}

// toolInput is a tool call's arguments as an object (the raw text of
// arguments that were not one is sent back as the model wrote them).
func toolInput(b model.Block) json.RawMessage {
	if len(b.Input) == 0 || b.InputError != "" {
		return json.RawMessage("{}")
	}
	return b.Input
}

func answerBlocks(r *model.Response) []model.Block {
	var out []model.Block
	for _, b := range r.Content {
		if b.Type == model.BlockText || b.Type == model.BlockToolUse {
			out = append(out, b)
		}
	}
	return out
}

func anthropicMessage(modelName, msgID string, r *model.Response) map[string]any {
	content := []map[string]any{}
	for _, b := range answerBlocks(r) {
		content = append(content, anthropicBlock(b))
	}
	return map[string]any{
		"id": msgID, "type": "message", "role": "assistant", "model": modelName,
		"content": content, "stop_reason": string(r.StopReason), "stop_sequence": nil,
		"usage": anthropicUsage(r.Usage),
	}
}

func (s *stream) finishAnthropic(r *model.Response) {
	for i, b := range answerBlocks(r) {
		if b.Type == model.BlockToolUse {
			s.send("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "tool_use", "id": b.ToolCallID, "name": b.ToolName, "input": map[string]any{}}})
			s.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": string(toolInput(b))}})
		} else {
			s.send("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "text", "text": ""}})
			s.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]any{"type": "text_delta", "text": b.Text}})
		}
		s.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	s.send("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": string(r.StopReason), "stop_sequence": nil},
		"usage": anthropicUsage(r.Usage)})
	s.send("message_stop", map[string]any{"type": "message_stop"})
}

// --- OpenAI Chat Completions ---

func finishReason(r *model.Response) string {
	switch r.StopReason {
	case model.StopToolUse:
		return "tool_calls"
	case model.StopMaxTokens:
		return "length"
	}
	return "stop"
}

func chatUsage(u model.Usage) map[string]any {
	prompt := u.InputTokens + u.CacheReadTokens + u.CacheWriteTokens
	return map[string]any{
		"prompt_tokens": prompt, "completion_tokens": u.OutputTokens, "total_tokens": prompt + u.OutputTokens,
		"prompt_tokens_details": map[string]int64{"cached_tokens": u.CacheReadTokens},
	}
}

func chatToolCalls(r *model.Response, withIndex bool) []map[string]any {
	var calls []map[string]any
	for _, b := range answerBlocks(r) {
		if b.Type != model.BlockToolUse {
			continue
		}
		c := map[string]any{"id": b.ToolCallID, "type": "function",
			"function": map[string]any{"name": b.ToolName, "arguments": string(toolInput(b))}}
		if withIndex {
			c["index"] = len(calls)
		}
		calls = append(calls, c)
	}
	return calls
}

func chatCompletion(modelName, cid string, r *model.Response) map[string]any {
	msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
	if t := blocksText(answerBlocks(r)); t != "" {
		msg["content"] = t
	}
	if calls := chatToolCalls(r, false); calls != nil {
		msg["tool_calls"] = calls
	}
	return map[string]any{
		"id": cid, "object": "chat.completion", "created": time.Now().Unix(), "model": modelName,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finishReason(r), "logprobs": nil}},
		"usage":   chatUsage(r.Usage),
	}
}

func (s *stream) chunk(delta map[string]any, finish any) map[string]any {
	return map[string]any{"id": s.id, "object": "chat.completion.chunk", "created": s.created, "model": s.p.model,
		"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}}}
}

func (s *stream) finishChat(r *model.Response) {
	if t := blocksText(answerBlocks(r)); t != "" {
		s.send("", s.chunk(map[string]any{"content": t}, nil))
	}
	for _, c := range chatToolCalls(r, true) {
		s.send("", s.chunk(map[string]any{"tool_calls": []any{c}}, nil))
	}
	s.send("", s.chunk(map[string]any{}, finishReason(r)))
	if s.p.includeUsage {
		s.send("", map[string]any{"id": s.id, "object": "chat.completion.chunk", "created": s.created, "model": s.p.model,
			"choices": []any{}, "usage": chatUsage(r.Usage)})
	}
	if s.err == nil {
		_, s.err = fmt.Fprint(s.w, "data: [DONE]\n\n")
		s.w.Flush()
	}
}

// --- OpenAI Responses ---

func responsesUsage(u model.Usage) map[string]any {
	in := u.InputTokens + u.CacheReadTokens + u.CacheWriteTokens
	return map[string]any{
		"input_tokens": in, "input_tokens_details": map[string]int64{"cached_tokens": u.CacheReadTokens},
		"output_tokens": u.OutputTokens, "output_tokens_details": map[string]int64{"reasoning_tokens": 0},
		"total_tokens": in + u.OutputTokens,
	}
}

// responseItems are the answer's output items, whole.
func responseItems(r *model.Response) []map[string]any {
	var items []map[string]any
	for _, b := range answerBlocks(r) {
		if b.Type == model.BlockToolUse {
			items = append(items, map[string]any{"type": "function_call", "id": id("fc_"), "call_id": b.ToolCallID,
				"name": b.ToolName, "arguments": string(toolInput(b)), "status": "completed"})
			continue
		}
		items = append(items, map[string]any{"type": "message", "id": id("msg_"), "status": "completed", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": b.Text, "annotations": []any{}}}})
	}
	return items
}

// responseObject is a Responses API response; r is nil while it is in
// progress or when it failed.
func responseObject(modelName, rid, status string, r *model.Response) map[string]any {
	o := map[string]any{
		"id": rid, "object": "response", "created_at": time.Now().Unix(), "status": status, "model": modelName,
		"output": []any{}, "parallel_tool_calls": true, "tool_choice": "auto", "tools": []any{},
		"error": nil, "incomplete_details": nil,
	}
	if r != nil {
		items := responseItems(r)
		if items != nil {
			o["output"] = items
		}
		o["usage"] = responsesUsage(r.Usage)
		if r.StopReason == model.StopMaxTokens {
			o["status"] = "incomplete"
			o["incomplete_details"] = map[string]string{"reason": "max_output_tokens"}
		}
	}
	return o
}

func (s *stream) finishResponses(r *model.Response) {
	ev := s.event
	items := responseItems(r)
	for i, it := range items {
		itemID := it["id"]
		if it["type"] == "function_call" {
			added := map[string]any{}
			for k, v := range it {
				added[k] = v
			}
			added["arguments"], added["status"] = "", "in_progress"
			ev("response.output_item.added", map[string]any{"output_index": i, "item": added})
			ev("response.function_call_arguments.delta", map[string]any{"item_id": itemID, "output_index": i, "delta": it["arguments"]})
			ev("response.function_call_arguments.done", map[string]any{"item_id": itemID, "output_index": i, "arguments": it["arguments"]})
		} else {
			text := it["content"].([]any)[0].(map[string]any)["text"]
			ev("response.output_item.added", map[string]any{"output_index": i, "item": map[string]any{
				"type": "message", "id": itemID, "status": "in_progress", "role": "assistant", "content": []any{}}})
			part := map[string]any{"type": "output_text", "text": "", "annotations": []any{}}
			ev("response.content_part.added", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0, "part": part})
			ev("response.output_text.delta", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0, "delta": text, "logprobs": []any{}})
			ev("response.output_text.done", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0, "text": text, "logprobs": []any{}})
			ev("response.content_part.done", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0,
				"part": map[string]any{"type": "output_text", "text": text, "annotations": []any{}}})
		}
		ev("response.output_item.done", map[string]any{"output_index": i, "item": it})
	}
	final := responseObject(s.p.model, s.id, "completed", r)
	end := "response.completed"
	if final["status"] == "incomplete" {
		end = "response.incomplete"
	}
	ev(end, map[string]any{"response": final})
}
