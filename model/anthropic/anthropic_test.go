package anthropic_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/model/anthropic"
	"github.com/reinsdev/reins/model/internal/fakehttp"
	"github.com/reinsdev/reins/model/retry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var fast = retry.Policy{Attempts: 3, Base: time.Millisecond, Max: 2 * time.Millisecond}

func newModel(t *testing.T, srv *fakehttp.Server) *anthropic.Model {
	t.Helper()
	m, err := anthropic.New(anthropic.Config{
		APIKey: "sk-ant-test", BaseURL: srv.URL, Model: "claude-sonnet-4-5",
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
		Usage:      model.Usage{InputTokens: 12, OutputTokens: 8},
	}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
	req := srv.Requests()[0]
	if req.Method != "POST" || req.Path != "/v1/messages" {
		t.Errorf("sent %s %s", req.Method, req.Path)
	}
	if got := req.Header.Get("Authorization"); got != "Bearer sk-ant-test" {
		t.Errorf("Authorization %q", got)
	}
	if req.Header.Get("Anthropic-Version") == "" {
		t.Error("no anthropic-version header")
	}
	var body map[string]any
	json.Unmarshal(req.Body, &body)
	if body["model"] != "claude-sonnet-4-5" || body["max_tokens"] != float64(anthropic.DefaultMaxTokens) {
		t.Errorf("model %v, max_tokens %v", body["model"], body["max_tokens"])
	}
}

// conversation is a run two steps in: a tool call answered with text and a
// screenshot, an earlier failed call, and tools with schemas.
func conversation() *model.Request {
	return &model.Request{
		Model:     "claude-opus-4-1",
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
				{Type: model.BlockToolUse, ToolCallID: "toolu_1", ToolName: "bash", Input: json.RawMessage(`{"command": "go test ./..."}`)},
			}},
			{Role: model.RoleUser, Content: []model.Block{
				{Type: model.BlockToolResult, ToolCallID: "toolu_1", Text: "--- FAIL: TestAdd\nexit status 1", IsError: true},
			}},
			{Role: model.RoleAssistant, Content: []model.Block{
				{Type: model.BlockText, Text: ""}, // dropped: the API refuses empty text
				{Type: model.BlockToolUse, ToolCallID: "toolu_2", ToolName: "screenshot", Input: json.RawMessage(`{}`)},
			}},
			{Role: model.RoleUser, Content: []model.Block{
				{Type: model.BlockToolResult, ToolCallID: "toolu_2", Text: "1024x768", Content: []model.Block{
					{Type: model.BlockImage, MediaType: "image/png", Data: "iVBORw0KGgo="},
				}},
			}},
		},
	}
}

func TestToolRoundTrip(t *testing.T) {
	srv := fakehttp.New(t, fakehttp.Reply{File: "testdata/tool_use.response.json"})
	r, err := newModel(t, srv).Generate(context.Background(), conversation())
	if err != nil {
		t.Fatal(err)
	}
	want := &model.Response{
		Content: []model.Block{
			{Type: model.BlockText, Text: "The fix is in; rerunning the tests."},
			{Type: model.BlockToolUse, ToolCallID: "toolu_01D7FLrfh4GYq7yT1ULFeyMV", ToolName: "bash", Input: json.RawMessage(`{"command": "go test ./...", "timeout_s": 120}`)},
		},
		StopReason: model.StopToolUse,
		Usage:      model.Usage{InputTokens: 35, OutputTokens: 61, CacheReadTokens: 4833, CacheWriteTokens: 1210},
	}
	if diff := cmp.Diff(want, r, cmp.Transformer("compact", compact)); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
	body := srv.Requests()[0].Body
	fakehttp.Golden(t, "testdata/tool_round_trip.request.json", body)
	checkBreakpoints(t, body)
}

// sentBody is the parts of a request body the tests read.
type sentBody struct {
	Model    string           `json:"model"`
	System   []map[string]any `json:"system"`
	Tools    []map[string]any `json:"tools"`
	Messages []struct {
		Role    string           `json:"role"`
		Content []map[string]any `json:"content"`
	} `json:"messages"`
}

// checkBreakpoints checks, apart from the golden file, where the cache
// breakpoints are: the last tool, the system prompt, the last two user
// turns — and nowhere else.
func checkBreakpoints(t *testing.T, body []byte) {
	t.Helper()
	var req sentBody
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	var where []string
	mark := func(name string, b map[string]any) {
		if cc, ok := b["cache_control"].(map[string]any); ok && cc["type"] == "ephemeral" {
			where = append(where, name)
		}
	}
	for _, b := range req.System {
		mark("system", b)
	}
	for _, b := range req.Tools {
		mark("tool "+b["name"].(string), b)
	}
	for i, m := range req.Messages {
		for j, b := range m.Content {
			mark(m.Role+" "+string(rune('0'+i))+"."+string(rune('0'+j)), b)
		}
	}
	want := []string{"system", "tool screenshot", "user 2.0", "user 4.0"}
	if diff := cmp.Diff(want, where); diff != "" {
		t.Errorf("cache breakpoints (-want +got):\n%s", diff)
	}
}

func compact(r json.RawMessage) string {
	var v any
	json.Unmarshal(r, &v)
	b, _ := json.Marshal(v)
	return string(b)
}

func TestMaxTokens(t *testing.T) {
	srv := fakehttp.New(t, fakehttp.Reply{File: "testdata/max_tokens.response.json"})
	r, err := newModel(t, srv).Generate(context.Background(), ask("write a novel"))
	if err != nil {
		t.Fatal(err)
	}
	if r.StopReason != model.StopMaxTokens {
		t.Errorf("stop %q", r.StopReason)
	}
}

func TestRateLimitThenSuccess(t *testing.T) {
	srv := fakehttp.New(t,
		fakehttp.Reply{Status: 429, Header: map[string]string{"Retry-After": "1"}, File: "testdata/429.response.json"},
		fakehttp.Reply{File: "testdata/text.response.json"},
	)
	if _, err := newModel(t, srv).Generate(context.Background(), ask("hi")); err != nil {
		t.Fatal(err)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	// The policy's own backoff is 1-2ms; the second try waited for the
	// server's Retry-After.
	if d := reqs[1].At.Sub(reqs[0].At); d < time.Second {
		t.Errorf("retried after %v, before the 1s Retry-After", d)
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

func TestOverloadedGivesUp(t *testing.T) {
	srv := fakehttp.New(t, fakehttp.Reply{Status: 529, File: "testdata/529.response.json"})
	_, err := newModel(t, srv).Generate(context.Background(), ask("hi"))
	if n := len(srv.Requests()); n != fast.Attempts {
		t.Errorf("%d requests, want %d", n, fast.Attempts)
	}
	const want = "anthropic: 529 overloaded_error: Overloaded (gave up after 3 attempts)"
	if err == nil || err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("kind %v", errdefs.Kind(err))
	}
}

func TestRefused(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   string
		kind   error
	}{
		{401, "anthropic: 401 authentication_error: invalid x-api-key (check ANTHROPIC_API_KEY)", errdefs.ErrUnauthenticated},
		{404, `anthropic: model "claude-sonnet-4-5": 404 not_found_error: model: claude-nonesuch (check the model name)`, errdefs.ErrNotFound},
		{400, "anthropic: 400 invalid_request_error: messages.1.content.0.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'", errdefs.ErrInvalidArgument},
	} {
		srv := fakehttp.New(t, fakehttp.Reply{Status: tc.status, File: "testdata/" + itoa(tc.status) + ".response.json"})
		_, err := newModel(t, srv).Generate(context.Background(), ask("hi"))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%d: error %q, want %q", tc.status, err, tc.want)
		}
		if !errors.Is(err, tc.kind) {
			t.Errorf("%d: kind %v, want %v", tc.status, errdefs.Kind(err), tc.kind)
		}
		if n := len(srv.Requests()); n != 1 {
			t.Errorf("%d: %d requests; a refusal is not retried", tc.status, n)
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestCancelDuringBackoff(t *testing.T) {
	srv := fakehttp.New(t, fakehttp.Reply{Status: 529, File: "testdata/529.response.json"})
	m, err := anthropic.New(anthropic.Config{APIKey: "k", BaseURL: srv.URL, Model: "m", HTTPClient: srv.Client(),
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
	if !errors.Is(err, context.Canceled) || !errors.Is(err, errdefs.ErrCanceled) {
		t.Fatalf("error %v (kind %v)", err, errdefs.Kind(err))
	}
	if !strings.Contains(err.Error(), "529 overloaded_error") || !strings.Contains(err.Error(), "while waiting to retry") {
		t.Errorf("error %q does not say what it was waiting for", err)
	}
}

func TestConfig(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "")
	_, err := anthropic.New(anthropic.Config{})
	if err == nil || !strings.Contains(err.Error(), "ANTHROPIC_API_KEY") {
		t.Errorf("no key: %v", err)
	}

	srv := fakehttp.New(t, fakehttp.Reply{File: "testdata/text.response.json"})
	t.Setenv("ANTHROPIC_API_KEY", "from-env")
	t.Setenv("ANTHROPIC_BASE_URL", srv.URL)
	m, err := anthropic.New(anthropic.Config{HTTPClient: srv.Client(), MaxTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	req := ask("hi")
	if _, err := m.Generate(context.Background(), req); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "no model") {
		t.Errorf("no model: %v", err)
	}
	req.Model = "claude-haiku-4-5"
	if _, err := m.Generate(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	sent := srv.Requests()[0]
	var body map[string]any
	json.Unmarshal(sent.Body, &body)
	if sent.Header.Get("Authorization") != "Bearer from-env" || body["model"] != "claude-haiku-4-5" || body["max_tokens"] != float64(100) {
		t.Errorf("sent %v with %v", body, sent.Header)
	}
}
