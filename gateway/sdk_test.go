package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/model/script"
)

// The providers' answers, as their APIs send them.
const (
	anthropicJSON = `{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"hello from anthropic"},{"type":"tool_use","id":"toolu_1","name":"bash","input":{"command":"ls"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":35,"output_tokens":61,"cache_creation_input_tokens":1210,"cache_read_input_tokens":4833}}`
	anthropicSSE  = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":35,\"output_tokens\":1,\"cache_creation_input_tokens\":1210,\"cache_read_input_tokens\":4833}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: ping\ndata: {\"type\": \"ping\"}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hello \"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"from anthropic\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"bash\",\"input\":{}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"command\\\": \"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"ls\\\"}\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":61}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	chatJSON = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4.1","choices":[{"index":0,"message":{"role":"assistant","content":"hello from openai","tool_calls":[{"id":"call_1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"ls\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1000,"completion_tokens":20,"total_tokens":1020,"prompt_tokens_details":{"cached_tokens":800}}}`
	chatSSE  = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4.1","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n" +
		`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4.1","choices":[{"index":0,"delta":{"content":"hello from openai"},"finish_reason":null}]}` + "\n\n" +
		`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4.1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"bash","arguments":""}}]},"finish_reason":null}]}` + "\n\n" +
		`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4.1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"command\":\"ls\"}"}}]},"finish_reason":null}]}` + "\n\n" +
		`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4.1","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\n" +
		`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4.1","choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":20,"total_tokens":1020,"prompt_tokens_details":{"cached_tokens":800}}}` + "\n\n" +
		"data: [DONE]\n\n"
	respJSON = `{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"gpt-5","output":[{"type":"reasoning","id":"rs_1","summary":[]},{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"hello from openai","annotations":[]}]},{"type":"function_call","id":"fc_1","call_id":"call_1","name":"bash","arguments":"{\"command\":\"ls\"}","status":"completed"}],"usage":{"input_tokens":1000,"input_tokens_details":{"cached_tokens":800},"output_tokens":20,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":1020}}`
)

func respSSE() string {
	var b strings.Builder
	ev := func(typ, rest string) { fmt.Fprintf(&b, "event: %s\ndata: {\"type\":%q,%s}\n\n", typ, typ, rest) }
	ev("response.created", `"response":{"id":"resp_1","object":"response","status":"in_progress","model":"gpt-5","output":[]}`)
	ev("response.output_item.added", `"output_index":0,"item":{"type":"message","id":"msg_1","status":"in_progress","role":"assistant","content":[]}`)
	ev("response.output_text.delta", `"item_id":"msg_1","output_index":0,"content_index":0,"delta":"hello from openai"}`[:len(`"item_id":"msg_1","output_index":0,"content_index":0,"delta":"hello from openai"`)])
	ev("response.completed", `"response":`+respJSON)
	return b.String()
}

// provider answers as a provider does, JSON or a stream as asked.
func provider(js, stream string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Stream bool `json:"stream"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		if req.Stream {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, stream)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, js)
	}
}

func anthropicClient(url, key string) anthropic.Client {
	return anthropic.NewClient(aoption.WithBaseURL(url), aoption.WithAPIKey(key), aoption.WithMaxRetries(0))
}

func openaiClient(url, key string) openai.Client {
	return openai.NewClient(ooption.WithBaseURL(url+"/v1"), ooption.WithAPIKey(key), ooption.WithMaxRetries(0))
}

var aParams = anthropic.MessageNewParams{
	Model: "claude-sonnet-4-5", MaxTokens: 100,
	System:   []anthropic.TextBlockParam{{Text: "be brief"}},
	Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
	Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "bash", Description: anthropic.String("runs a command"),
		InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"command": map[string]any{"type": "string"}}}}}},
}

var chatParams = openai.ChatCompletionNewParams{
	Model:    "gpt-4.1",
	Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("hi")},
	Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
		Name: "bash", Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}}}})},
}

var respParams = responses.ResponseNewParams{
	Model:        "gpt-5",
	Instructions: openai.String("be brief"),
	Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
	Tools: []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "bash",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}}}}}},
}

// wantAnswer checks an answer the SDK accumulated: its text and its one
// tool call.
func wantAnswer(t *testing.T, what, text, tool, args string) {
	t.Helper()
	var in struct{ Command string }
	if !strings.Contains(text, "hello from") || tool != "bash" || json.Unmarshal([]byte(args), &in) != nil || in.Command != "ls" {
		t.Errorf("%s: text %q, tool %q, args %q", what, text, tool, args)
	}
}

// wantRecord checks what the ledger recorded of a forwarded answer.
func wantRecord(t *testing.T, what string, r Result, usage model.Usage, upstream string) {
	t.Helper()
	if r.Status != 200 || r.Error != "" || r.Response == nil {
		t.Fatalf("%s: recorded status %d error %q response %v", what, r.Status, r.Error, r.Response)
	}
	if r.Response.Usage != usage {
		t.Errorf("%s: recorded usage %+v, want %+v", what, r.Response.Usage, usage)
	}
	if r.Response.StopReason != model.StopToolUse || len(r.Response.Content) != 2 || r.Response.Content[1].ToolName != "bash" ||
		!strings.HasPrefix(r.Response.Content[0].Text, "hello from") {
		t.Errorf("%s: recorded %+v", what, r.Response)
	}
	if r.Upstream != upstream || r.FirstByte <= 0 || r.Duration < r.FirstByte {
		t.Errorf("%s: upstream %q first byte %v duration %v", what, r.Upstream, r.FirstByte, r.Duration)
	}
}

func TestForwardAnthropicSDK(t *testing.T) {
	e := newEnv(t, envOpts{anthropic: provider(anthropicJSON, anthropicSSE)})
	c := anthropicClient(e.url, token("sb1"))
	ctx := context.Background()
	usage := model.Usage{InputTokens: 35, OutputTokens: 61, CacheReadTokens: 4833, CacheWriteTokens: 1210}

	msg, err := c.Messages.New(ctx, aParams, aoption.WithHeader("anthropic-beta", "tools-2099"), aoption.WithHeader("Cookie", "secret=1"))
	if err != nil {
		t.Fatal(err)
	}
	wantAnswer(t, "json", msg.Content[0].Text, msg.Content[1].Name, string(msg.Content[1].Input))
	wantRecord(t, "json", e.l.waitEnd(t), usage, "anthropic:claude-sonnet-4-5")
	up := e.anthropic.last(t)
	if up.Header.Get("X-Api-Key") != realKey || up.Header.Get("Anthropic-Version") == "" || up.Header.Get("Anthropic-Beta") != "tools-2099" {
		t.Errorf("upstream headers: %v", up.Header)
	}
	for k, vs := range up.Header {
		for _, v := range vs {
			if strings.Contains(v, token("sb1")) || strings.HasPrefix(strings.ToLower(k), "x-stainless") || k == "Cookie" {
				t.Errorf("upstream got %s: %s", k, v)
			}
		}
	}
	call := e.l.lastCall(t)
	if call.Wire != WireAnthropic || call.Model != "claude-sonnet-4-5" || call.Stream || call.Request.System != "be brief" ||
		len(call.Request.Tools) != 1 || call.Request.Messages[0].Content[0].Text != "hi" || call.Sandbox != "sb1" {
		t.Errorf("call: %+v %+v", call, call.Request)
	}

	acc := streamMessage(t, c)
	wantAnswer(t, "stream", acc.Content[0].Text, acc.Content[1].Name, string(acc.Content[1].Input))
	wantRecord(t, "stream", e.l.waitEnd(t), usage, "anthropic:claude-sonnet-4-5")
	if !e.l.lastCall(t).Stream {
		t.Error("the call was not recorded as streamed")
	}
}

func TestForwardRewritesModel(t *testing.T) {
	e := newEnv(t, envOpts{anthropic: func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Model string }
		json.NewDecoder(r.Body).Decode(&req)
		if req.Model != "claude-haiku-4-5" {
			t.Errorf("upstream asked for %q", req.Model)
		}
		provider(anthropicJSON, anthropicSSE)(w, r)
	}})
	e.l.set(func(l *ledger) { l.target = Target{Model: "anthropic:claude-haiku-4-5"} })
	c := anthropicClient(e.url, token("sb1"))
	if _, err := c.Messages.New(context.Background(), aParams); err != nil {
		t.Fatal(err)
	}
	if r := e.l.waitEnd(t); r.Upstream != "anthropic:claude-haiku-4-5" {
		t.Errorf("upstream %q", r.Upstream)
	}
}

func TestForwardOpenAISDK(t *testing.T) {
	var chatN, respN int
	e := newEnv(t, envOpts{openai: func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/chat/completions":
			chatN++
			provider(chatJSON, chatSSE)(w, r)
		case "/v1/responses":
			respN++
			provider(respJSON, respSSE())(w, r)
		default:
			t.Errorf("openai upstream got %s", r.URL.Path)
		}
	}})
	c := openaiClient(e.url, token("sb1"))
	ctx := context.Background()
	usage := model.Usage{InputTokens: 200, OutputTokens: 20, CacheReadTokens: 800}

	cc, err := c.Chat.Completions.New(ctx, chatParams)
	if err != nil {
		t.Fatal(err)
	}
	tc := cc.Choices[0].Message.ToolCalls[0]
	wantAnswer(t, "chat", cc.Choices[0].Message.Content, tc.Function.Name, tc.Function.Arguments)
	wantRecord(t, "chat", e.l.waitEnd(t), usage, "openai:gpt-4.1")
	if got := e.openai.last(t).Header.Get("Authorization"); got != "Bearer "+realKey {
		t.Errorf("upstream Authorization %q", got)
	}

	acc := streamChatSDK(t, c)
	tc = acc.Choices[0].Message.ToolCalls[0]
	wantAnswer(t, "chat stream", acc.Choices[0].Message.Content, tc.Function.Name, tc.Function.Arguments)
	wantRecord(t, "chat stream", e.l.waitEnd(t), usage, "openai:gpt-4.1")

	resp, err := c.Responses.New(ctx, respParams)
	if err != nil {
		t.Fatal(err)
	}
	fc := resp.Output[2].AsFunctionCall()
	wantAnswer(t, "responses", resp.OutputText(), fc.Name, fc.Arguments)
	wantRecord(t, "responses", e.l.waitEnd(t), usage, "openai:gpt-5")

	done, _ := streamResponse(t, c)
	fc = done.Output[2].AsFunctionCall()
	wantAnswer(t, "responses stream", done.OutputText(), fc.Name, fc.Arguments)
	wantRecord(t, "responses stream", e.l.waitEnd(t), usage, "openai:gpt-5")
	if chatN != 2 || respN != 2 {
		t.Errorf("upstream got %d chat and %d responses calls, want 2 and 2", chatN, respN)
	}
	call := e.l.lastCall(t)
	if call.Wire != WireOpenAIResponses || call.Request.System != "be brief" || len(call.Request.Tools) != 1 {
		t.Errorf("call %+v", call)
	}
}

// The translate path: a script answers, in each wire, streamed and not,
// and each SDK's accumulator takes the answer.
func TestTranslateSDKs(t *testing.T) {
	e := newEnv(t, envOpts{open: scripted(t,
		script.Turn{Text: "hello from script", ToolCalls: []script.ToolCall{{Name: "bash", Input: json.RawMessage(`{"command":"ls"}`)}}})})
	e.l.set(func(l *ledger) { l.target = Target{Model: "script:t"} })
	ctx := context.Background()
	ac := anthropicClient(e.url, token("sb1"))
	oc := openaiClient(e.url, token("sb1"))
	record := func(what string) {
		t.Helper()
		r := e.l.waitEnd(t)
		if r.Status != 200 || r.Upstream != "script:t" || r.Response == nil || r.Response.StopReason != model.StopToolUse {
			t.Errorf("%s: recorded %+v", what, r)
		}
	}

	msg, err := ac.Messages.New(ctx, aParams)
	if err != nil {
		t.Fatal(err)
	}
	wantAnswer(t, "anthropic", strings.Replace(msg.Content[0].Text, "script", "", 1), msg.Content[1].Name, string(msg.Content[1].Input))
	if msg.StopReason != "tool_use" || msg.Usage.InputTokens == 0 {
		t.Errorf("anthropic: stop %q usage %+v", msg.StopReason, msg.Usage)
	}
	record("anthropic")

	acc := streamMessage(t, ac)
	wantAnswer(t, "anthropic stream", acc.Content[0].Text, acc.Content[1].Name, string(acc.Content[1].Input))
	if acc.StopReason != "tool_use" || acc.Usage.OutputTokens == 0 {
		t.Errorf("anthropic stream: stop %q usage %+v", acc.StopReason, acc.Usage)
	}
	record("anthropic stream")

	cc, err := oc.Chat.Completions.New(ctx, chatParams)
	if err != nil {
		t.Fatal(err)
	}
	tc := cc.Choices[0].Message.ToolCalls[0]
	wantAnswer(t, "chat", cc.Choices[0].Message.Content, tc.Function.Name, tc.Function.Arguments)
	if cc.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("chat finish %q", cc.Choices[0].FinishReason)
	}
	record("chat")

	cacc := streamChatSDK(t, oc)
	tc = cacc.Choices[0].Message.ToolCalls[0]
	wantAnswer(t, "chat stream", cacc.Choices[0].Message.Content, tc.Function.Name, tc.Function.Arguments)
	if cacc.Usage.PromptTokens == 0 || cacc.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("chat stream: usage %+v finish %q", cacc.Usage, cacc.Choices[0].FinishReason)
	}
	record("chat stream")

	resp, err := oc.Responses.New(ctx, respParams)
	if err != nil {
		t.Fatal(err)
	}
	fc := resp.Output[1].AsFunctionCall()
	wantAnswer(t, "responses", resp.OutputText(), fc.Name, fc.Arguments)
	record("responses")

	done, deltas := streamResponse(t, oc)
	fc = done.Output[1].AsFunctionCall()
	wantAnswer(t, "responses stream", deltas, fc.Name, fc.Arguments)
	if done.Usage.InputTokens == 0 {
		t.Errorf("responses stream: usage %+v", done.Usage)
	}
	record("responses stream")
}

// A refusal of the Ledger reaches each SDK as an API error with its
// status and message; a model's error reaches it by its kind.
func TestRefusalsParsedBySDKs(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.l.set(func(l *ledger) {
		l.refuse = &Refusal{Status: 429, Type: "rate_limit_error", Message: "run r1 is over its budget of $1.00: raise --max-cost"}
	})
	ctx := context.Background()
	ac, oc := anthropicClient(e.url, token("sb1")), openaiClient(e.url, token("sb1"))
	_, err := ac.Messages.New(ctx, aParams)
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != 429 || !strings.Contains(ae.Error(), "over its budget") || !strings.Contains(ae.RawJSON(), "rate_limit_error") {
		t.Errorf("anthropic: %v", err)
	}
	_, err = oc.Responses.New(ctx, respParams)
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != 429 || !strings.Contains(oe.Message, "over its budget") {
		t.Errorf("openai: %v", err)
	}
	e.l.set(func(l *ledger) { l.refuse = nil })
	e.l.set(func(l *ledger) { l.target = Target{Model: "script:t"} }) // Open fails in this env
	_, err = oc.Chat.Completions.New(ctx, chatParams)
	if !errors.As(err, &oe) || oe.StatusCode != 500 || !strings.Contains(oe.Message, "could not open the model") {
		t.Errorf("openai open: %v", err)
	}
	if r := e.l.waitEnd(t); r.Status != 500 || r.Error == "" {
		t.Errorf("recorded %+v", r)
	}
}

func TestNoKeyRefused(t *testing.T) {
	e := newEnv(t, envOpts{noKey: true})
	c := anthropicClient(e.url, token("sb1"))
	_, err := c.Messages.New(context.Background(), aParams)
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != 403 || !strings.Contains(ae.Error(), "configures none") {
		t.Errorf("anthropic: %v", err)
	}
	if r := e.l.waitEnd(t); r.Status != 403 || !strings.Contains(r.Error, "no anthropic key") {
		t.Errorf("recorded %+v", r)
	}
	if n := e.anthropic.count(); n != 0 {
		t.Errorf("upstream hit %d times", n)
	}
}

// A provider's error reaches the program with its status, body and
// Retry-After as the provider sent them, and is recorded.
func TestUpstreamErrorPassedThrough(t *testing.T) {
	e := newEnv(t, envOpts{anthropic: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "7")
		w.Header().Set("Set-Cookie", "provider=1")
		w.WriteHeader(529)
		io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
	}})
	c := anthropicClient(e.url, token("sb1"))
	_, err := c.Messages.New(context.Background(), aParams)
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != 529 || !strings.Contains(ae.RawJSON(), "overloaded_error") {
		t.Fatalf("got %v", err)
	}
	if ae.Response.Header.Get("Retry-After") != "7" || ae.Response.Header.Get("Set-Cookie") != "" {
		t.Errorf("headers passed back: %v", ae.Response.Header)
	}
	if r := e.l.waitEnd(t); r.Status != 529 || r.Response != nil || !strings.Contains(r.Error, "529: Overloaded") {
		t.Errorf("recorded %+v", r)
	}
}

// streamMessage streams aParams with the SDK's accumulator.
func streamMessage(t *testing.T, c anthropic.Client) anthropic.Message {
	t.Helper()
	s := c.Messages.NewStreaming(context.Background(), aParams)
	var acc anthropic.Message
	for s.Next() {
		if err := acc.Accumulate(s.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return acc
}

// streamChatSDK streams chatParams, asking for usage, with the SDK's
// accumulator.
func streamChatSDK(t *testing.T, c openai.Client) openai.ChatCompletionAccumulator {
	t.Helper()
	p := chatParams
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	s := c.Chat.Completions.NewStreaming(context.Background(), p)
	var acc openai.ChatCompletionAccumulator
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return acc
}

// streamResponse streams respParams: the completed response and the text
// of its deltas.
func streamResponse(t *testing.T, c openai.Client) (responses.Response, string) {
	t.Helper()
	s := c.Responses.NewStreaming(context.Background(), respParams)
	var done responses.Response
	var deltas strings.Builder
	for s.Next() {
		switch ev := s.Current(); ev.Type {
		case "response.completed":
			done = ev.Response
		case "response.output_text.delta":
			deltas.WriteString(ev.Delta)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return done, deltas.String()
}

// slow is a model that answers (or fails) only once released.
type slow struct {
	release chan struct{}
	answer  *model.Response
	err     error
}

func (s *slow) Generate(ctx context.Context, _ *model.Request) (*model.Response, error) {
	select {
	case <-s.release:
		return s.answer, s.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// A slow translated stream opens and is kept alive before the answer
// exists: each SDK gets the stream's first event while the model still
// works (it is released only then), and the whole answer after; a model
// failing after the stream opened ends it with the wire's error event.
func TestSlowTranslatedStreamKeptAlive(t *testing.T) {
	defer func(a, e time.Duration) { keepAliveAfter, keepAliveEvery = a, e }(keepAliveAfter, keepAliveEvery)
	keepAliveAfter, keepAliveEvery = time.Millisecond, time.Millisecond
	answer := &model.Response{StopReason: model.StopToolUse, Usage: model.Usage{InputTokens: 5, OutputTokens: 7},
		Content: []model.Block{{Type: model.BlockText, Text: "hello from slow"},
			{Type: model.BlockToolUse, ToolCallID: "c1", ToolName: "bash", Input: json.RawMessage(`{"command":"ls"}`)}}}
	var m *slow
	e := newEnv(t, envOpts{open: func(Target) (model.Model, string, error) { return m, "", nil }})
	e.l.set(func(l *ledger) { l.target = Target{Model: "script:slow"} })
	ctx := context.Background()
	ac, oc := anthropicClient(e.url, token("sb1")), openaiClient(e.url, token("sb1"))
	for _, fail := range []bool{false, true} {
		newModel := func() {
			m = &slow{release: make(chan struct{}), answer: answer}
			if fail {
				m.answer, m.err = nil, errdefs.WithMessage(errdefs.ErrResourceExhausted, "openai: 429 rate limited: try later")
			}
		}
		check := func(what string, first bool, err error) {
			t.Helper()
			if !first {
				t.Errorf("%s: no event before the model answered", what)
			}
			if fail && (err == nil || !strings.Contains(err.Error(), "rate limited")) {
				t.Errorf("%s: a failed model ended the stream with %v", what, err)
			}
			if !fail && err != nil {
				t.Errorf("%s: %v", what, err)
			}
			if r := e.l.waitEnd(t); r.Status != 200 || (r.Error != "") != fail {
				t.Errorf("%s: recorded %+v", what, r)
			}
		}

		newModel()
		as := ac.Messages.NewStreaming(ctx, aParams)
		var acc anthropic.Message
		first := as.Next() && as.Current().Type == "message_start"
		acc.Accumulate(as.Current())
		close(m.release)
		for as.Next() {
			acc.Accumulate(as.Current())
		}
		as.Close()
		check("anthropic", first, as.Err())
		if !fail {
			wantAnswer(t, "anthropic", acc.Content[0].Text, acc.Content[1].Name, string(acc.Content[1].Input))
		}

		newModel()
		cs := oc.Chat.Completions.NewStreaming(ctx, chatParams)
		var cacc openai.ChatCompletionAccumulator
		first = cs.Next() && cs.Current().Choices[0].Delta.Role == "assistant"
		cacc.AddChunk(cs.Current())
		close(m.release)
		for cs.Next() {
			cacc.AddChunk(cs.Current())
		}
		cs.Close()
		check("chat", first, cs.Err())
		if !fail {
			tc := cacc.Choices[0].Message.ToolCalls[0]
			wantAnswer(t, "chat", cacc.Choices[0].Message.Content, tc.Function.Name, tc.Function.Arguments)
		}

		newModel()
		rs := oc.Responses.NewStreaming(ctx, respParams)
		first = rs.Next() && rs.Current().Type == "response.created"
		close(m.release)
		var done responses.Response
		var rerr error
		for rs.Next() {
			switch ev := rs.Current(); ev.Type {
			case "response.completed":
				done = ev.Response
			case "response.failed":
				rerr = errors.New(ev.Response.Error.Message)
			}
		}
		if rerr == nil {
			rerr = rs.Err()
		}
		rs.Close()
		check("responses", first, rerr)
		if !fail {
			fc := done.Output[1].AsFunctionCall()
			wantAnswer(t, "responses", done.OutputText(), fc.Name, fc.Arguments)
		}
	}
}

// A model's error on the translate path is answered by its kind, in the
// wire's format, and recorded.
func TestModelErrorByKind(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
		typ    string
	}{
		{errdefs.WithMessage(errdefs.ErrFailedPrecondition, "script s: turn 1 expects x in the last observation"), 400, "invalid_request_error"},
		{errdefs.WithMessage(errdefs.ErrResourceExhausted, "openai: 429 quota"), 429, "rate_limit_error"},
		{errdefs.WithMessage(errdefs.ErrUnavailable, "openai: 503 (gave up after 5 attempts)"), 503, "overloaded_error"},
		{errdefs.WithMessage(errdefs.ErrUnauthenticated, "openai: 401 invalid key (check OPENAI_API_KEY)"), 403, "permission_error"},
		{errors.New("something else"), 500, "api_error"},
	} {
		m := &slow{release: make(chan struct{}), err: c.err}
		close(m.release)
		e := newEnv(t, envOpts{open: func(Target) (model.Model, string, error) { return m, "", nil }})
		e.l.set(func(l *ledger) { l.target = Target{Model: "openai:gpt-4.1"} })
		ac := anthropicClient(e.url, token("sb1"))
		_, err := ac.Messages.New(context.Background(), aParams)
		var ae *anthropic.Error
		if !errors.As(err, &ae) || ae.StatusCode != c.status || !strings.Contains(ae.RawJSON(), c.typ) || !strings.Contains(ae.Error(), c.err.Error()) {
			t.Errorf("%v: got %v", c.err, err)
		}
		if r := e.l.waitEnd(t); r.Status != c.status || r.Error != c.err.Error() || r.Upstream != "openai:gpt-4.1" {
			t.Errorf("%v: recorded %+v", c.err, r)
		}
	}
}

// A provider that cannot be reached: 502 to the program, and neither it
// nor the record names the provider's address.
func TestProviderUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	led := newLedger()
	g, err := New(Config{Ledger: led, Authorize: func(_ context.Context, sb, tok string) bool { return tok == token(sb) },
		Anthropic: Upstream{BaseURL: "http://" + addr, Key: realKey}})
	if err != nil {
		t.Fatal(err)
	}
	c := anthropicClient(serve(t, g, "sb1"), token("sb1"))
	_, err = c.Messages.New(context.Background(), aParams)
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != 502 || strings.Contains(ae.RawJSON(), addr) {
		t.Errorf("got %v", err)
	}
	if r := led.waitEnd(t); r.Status != 502 || r.Error == "" || strings.Contains(r.Error, addr) {
		t.Errorf("recorded %+v", r)
	}
}
