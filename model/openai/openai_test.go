package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/model/internal/fakehttp"
	"github.com/reinsdev/reins/model/openai"
	"github.com/reinsdev/reins/model/retry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var fast = retry.Policy{Attempts: 3, Base: time.Millisecond, Max: 2 * time.Millisecond}

func newModel(t *testing.T, srv *fakehttp.Server) *openai.Model {
	t.Helper()
	m, err := openai.New(openai.Config{
		APIKey: "sk-test", BaseURL: srv.URL + "/v1", Model: "gpt-4.1",
		HTTPClient: srv.Client(), Retry: fast,
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func ask(text string) *model.Request {
	return &model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: []model.Block{{Type: model.BlockText, Text: text}}}}}
}

func TestText(t *testing.T) {
	srv := fakehttp.New(t, fakehttp.Reply{File: "testdata/text.response.json"})
	r, err := newModel(t, srv).Generate(context.Background(), ask("hi"))
	if err != nil {
		t.Fatal(err)
	}
	want := &model.Response{
		Content:    []model.Block{{Type: model.BlockText, Text: "Hello! How can I help?"}},
		StopReason: model.StopEndTurn,
		Usage:      model.Usage{InputTokens: 19, OutputTokens: 10},
	}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
	req := srv.Requests()[0]
	if req.Method != "POST" || req.Path != "/v1/chat/completions" {
		t.Errorf("sent %s %s", req.Method, req.Path)
	}
	if got := req.Header.Get("Authorization"); got != "Bearer sk-test" {
		t.Errorf("Authorization %q", got)
	}
	fakehttp.Golden(t, "testdata/text.request.json", req.Body)
}

// conversation is a run two steps in: a failed call, then a screenshot
// whose image must move out of the tool message.
func conversation() *model.Request {
	return &model.Request{
		Model:     "gpt-4.1-mini",
		MaxTokens: 2048,
		System:    "You are a careful engineer. Use the tools.",
		Tools: []model.ToolSpec{
			{Name: "bash", Description: "Run a shell command.", InputSchema: json.RawMessage(
				`{"type": "object", "properties": {"command": {"type": "string"}, "timeout_s": {"type": "integer"}}, "required": ["command"], "additionalProperties": false}`)},
			{Name: "screenshot", Description: "Capture the screen.", InputSchema: json.RawMessage(`{"type": "object", "properties": {}}`)},
		},
		Messages: []model.Message{
			{Role: model.RoleUser, Content: []model.Block{{Type: model.BlockText, Text: "Fix the failing test."}}},
			{Role: model.RoleAssistant, Content: []model.Block{
				{Type: model.BlockText, Text: "Running the tests."},
				{Type: model.BlockToolUse, ToolCallID: "call_1", ToolName: "bash", Input: json.RawMessage(`{"command": "go test ./..."}`)},
				// A call the model botched earlier replays as it wrote it.
				{Type: model.BlockToolUse, ToolCallID: "call_2", ToolName: "bash", Input: json.RawMessage(`"{\"command\": \"ls"`), InputError: "the arguments are not valid JSON: unexpected end of JSON input"},
			}},
			{Role: model.RoleUser, Content: []model.Block{
				{Type: model.BlockToolResult, ToolCallID: "call_1", Text: "--- FAIL: TestAdd\nexit status 1", IsError: true},
				{Type: model.BlockToolResult, ToolCallID: "call_2", Text: "the arguments were not valid JSON", IsError: true},
			}},
			{Role: model.RoleAssistant, Content: []model.Block{
				{Type: model.BlockToolUse, ToolCallID: "call_3", ToolName: "screenshot", Input: json.RawMessage(`{}`)},
			}},
			{Role: model.RoleUser, Content: []model.Block{
				{Type: model.BlockToolResult, ToolCallID: "call_3", Text: "1024x768", Content: []model.Block{
					{Type: model.BlockImage, MediaType: "image/png", Data: "iVBORw0KGgo="},
				}},
				{Type: model.BlockText, Text: "Note: the build server is slow today."},
			}},
		},
	}
}

func TestToolRoundTrip(t *testing.T) {
	srv := fakehttp.New(t, fakehttp.Reply{File: "testdata/tool_calls.response.json"})
	r, err := newModel(t, srv).Generate(context.Background(), conversation())
	if err != nil {
		t.Fatal(err)
	}
	want := &model.Response{
		Content: []model.Block{
			{Type: model.BlockText, Text: "The fix is in; rerunning the tests."},
			{Type: model.BlockToolUse, ToolCallID: "call_9pw1qnYScqvGrCH58HWCvFH6", ToolName: "bash", Input: json.RawMessage(`{"command":"go test ./...","timeout_s":120}`)},
		},
		StopReason: model.StopToolUse,
		// prompt_tokens counts the cached ones too; Usage's counts are disjoint.
		Usage: model.Usage{InputTokens: 6083 - 4864, OutputTokens: 61, CacheReadTokens: 4864},
	}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
	body := srv.Requests()[0].Body
	fakehttp.Golden(t, "testdata/tool_round_trip.request.json", body)

	// Apart from the golden file: the roles in order, the image after the
	// tool messages, and the botched call's arguments as the model wrote them.
	var sent struct {
		Messages []struct {
			Role      string          `json:"role"`
			Content   json.RawMessage `json:"content"`
			ToolCalls []struct {
				Function struct{ Arguments string } `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
		MaxCompletionTokens *int `json:"max_completion_tokens"`
		MaxTokens           *int `json:"max_tokens"`
	}
	json.Unmarshal(body, &sent)
	var roles []string
	for _, m := range sent.Messages {
		roles = append(roles, m.Role)
	}
	if diff := cmp.Diff([]string{"system", "user", "assistant", "tool", "tool", "assistant", "tool", "user"}, roles); diff != "" {
		t.Errorf("roles (-want +got):\n%s", diff)
	}
	if got := sent.Messages[2].ToolCalls[1].Function.Arguments; got != `{"command": "ls` {
		t.Errorf("botched call replayed as %q", got)
	}
	if last := string(sent.Messages[7].Content); !strings.Contains(last, "data:image/png;base64,iVBORw0KGgo=") {
		t.Errorf("image not in the last user message: %s", last)
	}
	// A local server (this one) gets max_tokens, which they all know.
	if sent.MaxTokens == nil || *sent.MaxTokens != 2048 || sent.MaxCompletionTokens != nil {
		t.Errorf("max_tokens %v, max_completion_tokens %v", sent.MaxTokens, sent.MaxCompletionTokens)
	}
}

// TestMalformedToolCall: a model (here a small local one) that writes bad
// arguments does not fail the call; the blocks say what is wrong.
func TestMalformedToolCall(t *testing.T) {
	srv := fakehttp.New(t, fakehttp.Reply{File: "testdata/malformed.response.json"})
	r, err := newModel(t, srv).Generate(context.Background(), ask("look around"))
	if err != nil {
		t.Fatal(err)
	}
	want := []model.Block{
		{Type: model.BlockToolUse, ToolCallID: "call_a", ToolName: "bash", Input: json.RawMessage(`"{\"command\": \"ls -la"`),
			InputError: "the arguments are not valid JSON: unexpected end of JSON input"},
		{Type: model.BlockToolUse, ToolCallID: "call_b", ToolName: "read_file", Input: json.RawMessage(`"[\"main.go\"]"`),
			InputError: "the arguments must be a JSON object, not an array"},
		{Type: model.BlockToolUse, ToolCallID: "call_c", ToolName: "list_files", Input: json.RawMessage(`{}`)},
		{Type: model.BlockToolUse, ToolCallID: "call_3", ToolName: "glob", Input: json.RawMessage(`{"pattern": "*.go"}`)},
	}
	if diff := cmp.Diff(want, r.Content); diff != "" {
		t.Errorf("blocks (-want +got):\n%s", diff)
	}
	// finish_reason "stop" with tool calls, as some servers send, is still tool use.
	if r.StopReason != model.StopToolUse {
		t.Errorf("stop %q", r.StopReason)
	}
	// The blocks survive the event log.
	for _, b := range r.Content {
		if _, err := json.Marshal(b); err != nil {
			t.Errorf("block %s does not marshal: %v", b.ToolCallID, err)
		}
	}
}

func TestRateLimitThenSuccess(t *testing.T) {
	srv := fakehttp.New(t,
		fakehttp.Reply{Status: 429, Header: map[string]string{"Retry-After-Ms": "300", "Retry-After": "1"}, File: "testdata/429.response.json"},
		fakehttp.Reply{File: "testdata/text.response.json"},
	)
	if _, err := newModel(t, srv).Generate(context.Background(), ask("hi")); err != nil {
		t.Fatal(err)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	if d := reqs[1].At.Sub(reqs[0].At); d < 300*time.Millisecond || d > 900*time.Millisecond {
		t.Errorf("retried after %v, want the 300ms retry-after-ms asked", d)
	}
}

func TestQuotaNotRetried(t *testing.T) {
	srv := fakehttp.New(t, fakehttp.Reply{Status: 429, File: "testdata/429_quota.response.json"})
	_, err := newModel(t, srv).Generate(context.Background(), ask("hi"))
	const want = "openai: 429 insufficient_quota: You exceeded your current quota, please check your plan and billing details. (check the account's plan and billing)"
	if err == nil || err.Error() != want || !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("error %q (kind %v), want %q", err, errdefs.Kind(err), want)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d requests", n)
	}
}

func TestServerErrorGivesUp(t *testing.T) {
	srv := fakehttp.New(t, fakehttp.Reply{Status: 500, File: "testdata/500.response.json"})
	_, err := newModel(t, srv).Generate(context.Background(), ask("hi"))
	if n := len(srv.Requests()); n != fast.Attempts {
		t.Errorf("%d requests, want %d", n, fast.Attempts)
	}
	const want = "openai: 500 server_error: The server had an error while processing your request. Sorry about that! (gave up after 3 attempts)"
	if err == nil || err.Error() != want || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("error %q (kind %v), want %q", err, errdefs.Kind(err), want)
	}
}

// TestPlainTextError: a proxy in front of a local server answers in text.
func TestPlainTextError(t *testing.T) {
	srv := fakehttp.New(t, fakehttp.Reply{Status: 502, Body: "upstream connect error or disconnect/reset before headers"})
	_, err := newModel(t, srv).Generate(context.Background(), ask("hi"))
	const want = "openai: 502 Bad Gateway: upstream connect error or disconnect/reset before headers (gave up after 3 attempts)"
	if err == nil || err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

func TestRefused(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   string
		kind   error
	}{
		{401, "openai: 401 invalid_api_key: Incorrect API key provided: sk-test. You can find your API key at https://platform.openai.com/account/api-keys. (check OPENAI_API_KEY)", errdefs.ErrUnauthenticated},
		{404, "openai: model \"gpt-4.1\": 404 model_not_found: The model `gpt-nonesuch` does not exist or you do not have access to it. (check the model name and OPENAI_BASE_URL=%s/v1)", errdefs.ErrNotFound},
		{400, "openai: 400 string_above_max_length: Invalid 'messages[2].tool_call_id': string too long. Expected a string with maximum length 40, but got a string with length 64 instead.", errdefs.ErrInvalidArgument},
	} {
		srv := fakehttp.New(t, fakehttp.Reply{Status: tc.status, File: fmt.Sprintf("testdata/%d.response.json", tc.status)})
		_, err := newModel(t, srv).Generate(context.Background(), ask("hi"))
		want := tc.want
		if strings.Contains(want, "%s") {
			want = fmt.Sprintf(want, srv.URL)
		}
		if err == nil || err.Error() != want {
			t.Errorf("%d: error %q, want %q", tc.status, err, want)
		}
		if !errors.Is(err, tc.kind) {
			t.Errorf("%d: kind %v, want %v", tc.status, errdefs.Kind(err), tc.kind)
		}
		if n := len(srv.Requests()); n != 1 {
			t.Errorf("%d: %d requests; a refusal is not retried", tc.status, n)
		}
	}
}

func TestConnectionResetThenSuccess(t *testing.T) {
	srv := fakehttp.New(t, fakehttp.Reply{Reset: true}, fakehttp.Reply{File: "testdata/text.response.json"})
	if _, err := newModel(t, srv).Generate(context.Background(), ask("hi")); err != nil {
		t.Fatal(err)
	}
	if n := len(srv.Requests()); n != 2 {
		t.Errorf("%d requests", n)
	}
}

func TestServerDown(t *testing.T) {
	srv := fakehttp.New(t)
	url := srv.URL
	srv.Close()
	m, err := openai.New(openai.Config{BaseURL: url + "/v1", Model: "llama3.1:8b", Retry: fast})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Generate(context.Background(), ask("hi"))
	if err == nil || !strings.Contains(err.Error(), "connection refused") ||
		!strings.Contains(err.Error(), "is the server at "+url+"/v1 running?") || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("error %v", err)
	}
}

func TestCancelDuringBackoff(t *testing.T) {
	srv := fakehttp.New(t, fakehttp.Reply{Status: 500, File: "testdata/500.response.json"})
	m, err := openai.New(openai.Config{BaseURL: srv.URL, Model: "m", HTTPClient: srv.Client(),
		Retry: retry.Policy{Base: time.Hour, Max: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-srv.Received
		time.Sleep(20 * time.Millisecond) // into the backoff
		cancel()
	}()
	start := time.Now()
	_, err = m.Generate(ctx, ask("hi"))
	if time.Since(start) > 5*time.Second {
		t.Fatalf("Generate took %v after cancel", time.Since(start))
	}
	if !errors.Is(err, context.Canceled) || !errors.Is(err, errdefs.ErrCanceled) || !strings.Contains(err.Error(), "500 server_error") {
		t.Fatalf("error %v (kind %v)", err, errdefs.Kind(err))
	}
}

func TestKeyRequirement(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", "")
	_, err := openai.New(openai.Config{Model: "gpt-4.1"})
	if err == nil || !strings.Contains(err.Error(), "OPENAI_API_KEY") || !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("OpenAI without a key: %v", err)
	}
	// A local server needs none, and is sent none.
	srv := fakehttp.New(t, fakehttp.Reply{File: "testdata/text.response.json"})
	t.Setenv("OPENAI_BASE_URL", srv.URL+"/v1")
	m, err := openai.New(openai.Config{Model: "llama3.1:8b", HTTPClient: srv.Client()})
	if err != nil {
		t.Fatalf("local server without a key: %v", err)
	}
	if _, err := m.Generate(context.Background(), ask("hi")); err != nil {
		t.Fatal(err)
	}
	if got := srv.Requests()[0].Header.Get("Authorization"); got != "" {
		t.Errorf("sent Authorization %q without a key", got)
	}
	if _, err := openai.New(openai.Config{BaseURL: "localhost:11434"}); err == nil || !strings.Contains(err.Error(), "not an http(s) URL") {
		t.Errorf("bad base URL: %v", err)
	}
}

// TestOfficialMaxTokens: OpenAI's own API gets max_completion_tokens,
// which its newer models require. The fake stands in for api.openai.com
// through a transport that sends every request to it.
func TestOfficialMaxTokens(t *testing.T) {
	srv := fakehttp.New(t, fakehttp.Reply{File: "testdata/text.response.json"})
	// The fake's own transport, whose idle connections it closes.
	client := &http.Client{Transport: redirect{to: srv.Listener.Addr().String(), rt: srv.Client().Transport}}
	m, err := openai.New(openai.Config{APIKey: "sk-test", BaseURL: "http://api.openai.com/v1", Model: "gpt-5", MaxTokens: 500, HTTPClient: client})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Generate(context.Background(), ask("hi")); err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	json.Unmarshal(srv.Requests()[0].Body, &body)
	if body["max_completion_tokens"] != float64(500) || body["max_tokens"] != nil {
		t.Errorf("sent %v", body)
	}
}

type redirect struct {
	to string
	rt http.RoundTripper
}

func (r redirect) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.URL.Host = r.to
	return r.rt.RoundTrip(req)
}
