package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reinsdev/reins/model"
)

func post(t *testing.T, url, path, key string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("X-Api-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

const hi = `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`

func TestAuthRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	other := serve(t, e.g, "sb2")
	none := serve(t, e.g, "")
	for _, c := range []struct{ what, url, key string }{
		{"no token", e.url, ""},
		{"wrong token", e.url, "rgw_guess"},
		{"another sandbox's token", other, token("sb1")},
		{"a connection of no sandbox", none, token("sb1")},
	} {
		resp, body := post(t, c.url, "/v1/messages", c.key, []byte(hi))
		var v struct {
			Type  string
			Error struct{ Type, Message string }
		}
		json.Unmarshal(body, &v)
		if resp.StatusCode != 401 || v.Type != "error" || v.Error.Type != "authentication_error" || strings.Contains(string(body), token("sb1")) {
			t.Errorf("%s: %d %s", c.what, resp.StatusCode, body)
		}
	}
	// OpenAI's format on its paths.
	req, _ := http.NewRequest(http.MethodPost, e.url+"/v1/chat/completions", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer rgw_guess")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var v struct{ Error struct{ Code, Type string } }
	json.Unmarshal(body, &v)
	if resp.StatusCode != 401 || v.Error.Code != "invalid_api_key" {
		t.Errorf("openai: %d %s", resp.StatusCode, body)
	}
	// Two different tokens in one request.
	req, _ = http.NewRequest(http.MethodPost, e.url+"/v1/messages", strings.NewReader(hi))
	req.Header.Set("X-Api-Key", token("sb1"))
	req.Header.Set("Authorization", "Bearer rgw_other")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("two tokens: %d", resp.StatusCode)
	}
	if n := e.l.numCalls(); n != 0 {
		t.Errorf("the ledger saw %d calls", n)
	}
}

func TestLocalPathsNeverForwarded(t *testing.T) {
	e := newEnv(t, envOpts{anthropic: provider(anthropicJSON, anthropicSSE), openai: provider(chatJSON, chatSSE)})
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{"HEAD", "/", 200}, {"GET", "/", 200}, {"GET", "/v1/models", 200}, {"HEAD", "/api/hello", 200},
		{"POST", "/api/event_logging/batch", 200},
		{"POST", "/v1/complete", 404}, {"GET", "/api/claude_code/settings", 404}, {"POST", "/api/hello", 404},
		{"GET", "/v1/messages", 404}, {"POST", "/v1/messages/batches", 404}, {"POST", "/v1/files", 404},
		{"POST", "/v1/x/../messages", 404}, {"POST", "//v1/messages", 404}, {"POST", "/v1/messages/", 404},
		{"POST", "/v1%2Fmessages", 404}, {"POST", "/v1/./chat/completions", 404}, {"POST", "/v1/embeddings", 404},
	} {
		req, _ := http.NewRequest(c.method, e.url+c.path, strings.NewReader(hi))
		req.URL.RawPath = ""
		req.URL.Opaque = c.path // as sent, uncleaned
		req.Header.Set("X-Api-Key", token("sb1"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.status)
		}
	}
	if n := e.anthropic.count() + e.openai.count(); n != 0 {
		t.Errorf("upstreams hit %d times", n)
	}
	if e.l.numCalls() != 0 {
		t.Errorf("ledger saw %d calls", e.l.numCalls())
	}
	resp, body := post(t, e.url, "/v1/messages/count_tokens", token("sb1"), []byte(hi))
	if resp.StatusCode != 200 || string(body) != `{"input_tokens":1}` {
		t.Errorf("count_tokens: %d %s", resp.StatusCode, body)
	}
}

func TestBadBodies(t *testing.T) {
	e := newEnv(t, envOpts{})
	big := append([]byte(`{"model":"x","messages":[{"role":"user","content":"`), bytes.Repeat([]byte("a"), MaxBody)...)
	big = append(big, `"}]}`...)
	for _, c := range []struct {
		what   string
		body   []byte
		status int
		typ    string
	}{
		{"oversized", big, 413, "request_too_large"},
		{"malformed", []byte(`{"model":`), 400, "invalid_request_error"},
		{"not a request", []byte(`{"messages":"x"}`), 400, "invalid_request_error"},
		{"bad role", []byte(`{"messages":[{"role":"root","content":"x"}]}`), 400, "invalid_request_error"},
	} {
		resp, body := post(t, e.url, "/v1/messages", token("sb1"), c.body)
		var v struct{ Error struct{ Type string } }
		json.Unmarshal(body, &v)
		if resp.StatusCode != c.status || v.Error.Type != c.typ {
			t.Errorf("%s: %d %s", c.what, resp.StatusCode, body)
		}
	}
	if e.l.numCalls() != 0 {
		t.Errorf("ledger saw %d calls", e.l.numCalls())
	}
}

// raw sends bytes as they are on a new connection, closes its side, and
// reads every answer until the server closes: once it returns, every
// request the bytes held (a smuggled one too) has been served.
func raw(t *testing.T, url, req string) string {
	t.Helper()
	return exchange(t, url, req, true)
}

// rawOne is raw for one request whose answer closes the connection; its
// side stays open (a program that half-closes is one gone, whose call the
// gateway drops).
func rawOne(t *testing.T, url, req string) string {
	t.Helper()
	return exchange(t, url, req, false)
}

func exchange(t *testing.T, url, req string, closeWrite bool) string {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, req)
	if closeWrite {
		c.(*net.TCPConn).CloseWrite()
	}
	all, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading the answers: %v", err)
	}
	return string(all)
}

// Header and framing games from a hostile program: none reaches the
// Ledger or a provider, and none smuggles a second request.
func TestHeaderSmuggling(t *testing.T) {
	e := newEnv(t, envOpts{anthropic: provider(anthropicJSON, anthropicSSE)})
	tok := token("sb1")
	// The tunnel hands the gateway raw bytes: it is the only parser, so a
	// request hidden behind framing games is just another request on the
	// connection, and must be refused as any other with a bad token.
	smuggled := "POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Api-Key: " + token("sb2") + "\r\nContent-Length: " + fmt.Sprint(len(hi)) + "\r\n\r\n" + hi
	for _, c := range []struct{ what, req string }{
		{"CR in x-api-key", "POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Api-Key: rgw_a\rX-Api-Key: " + tok + "\r\nContent-Length: 2\r\n\r\n{}"},
		{"CR in anthropic-beta", "POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Api-Key: " + tok + "\r\nAnthropic-Beta: a\rX-Api-Key: evil\r\nContent-Length: 2\r\n\r\n{}"},
		{"folded x-api-key", "POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Api-Key: rgw_a\r\n " + tok + "\r\nContent-Length: 2\r\n\r\n{}"},
		{"two x-api-keys", "POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Api-Key: rgw_a\r\nX-Api-Key: " + tok + "\r\nContent-Length: 2\r\n\r\n{}"},
		{"TE and CL", "POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Api-Key: rgw_a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled},
		{"TE identity", "POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Api-Key: rgw_a\r\nTransfer-Encoding: identity\r\nContent-Length: 2\r\n\r\n{}" + smuggled},
		{"double CL", "POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Api-Key: rgw_a\r\nContent-Length: 2\r\nContent-Length: 40\r\n\r\n{}" + smuggled},
		{"smuggled alone", smuggled},
		{"gzip body", "POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Api-Key: " + tok + "\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}"},
	} {
		got := raw(t, e.url, c.req)
		if strings.Contains(got, " 200 OK") || e.anthropic.count() != 0 {
			t.Errorf("%s: %s (upstream hit %d times)", c.what, got, e.anthropic.count())
		}
	}
	if e.anthropic.count() != 0 || e.l.numCalls() != 0 {
		t.Errorf("upstream hit %d times, ledger saw %d calls", e.anthropic.count(), e.l.numCalls())
	}
}

// The first event reaches the program before the provider sends the
// second: nothing is buffered on the way.
func TestStreamUnbuffered(t *testing.T) {
	first, second := make(chan struct{}), make(chan struct{})
	e := newEnv(t, envOpts{anthropic: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		events := strings.SplitAfter(anthropicSSE, "\n\n")
		io.WriteString(w, events[0])
		w.(http.Flusher).Flush()
		close(first)
		select {
		case <-second:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, strings.Join(events[1:], ""))
	}})
	// Were the first event held back, the answer's headers would be too:
	// the call fails at this deadline instead of hanging.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/v1/messages", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
	req.Header.Set("X-Api-Key", token("sb1"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the first event did not come before the provider sent the second: %v", err)
	}
	defer resp.Body.Close()
	<-first
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "event: message_start\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	close(second) // only now may the provider go on
	rest, _ := io.ReadAll(br)
	if !strings.HasSuffix(string(rest), "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n") {
		t.Errorf("the stream did not end whole: %q", rest)
	}
	if r := e.l.waitEnd(t); r.Error != "" || r.Response == nil {
		t.Errorf("recorded %+v", r)
	}
}

// A provider that streams forever is bounded by the call's ctx: the
// program going away ends it, and the record says so.
func TestEndlessStreamBoundedByCtx(t *testing.T) {
	gone := make(chan struct{})
	e := newEnv(t, envOpts{anthropic: func(w http.ResponseWriter, r *http.Request) {
		defer close(gone)
		w.Header().Set("Content-Type", "text/event-stream")
		for r.Context().Err() == nil {
			io.WriteString(w, "event: ping\ndata: {\"type\":\"ping\"}\n\n")
			w.(http.Flusher).Flush()
			time.Sleep(time.Millisecond)
		}
	}})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/v1/messages", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
	req.Header.Set("X-Api-Key", token("sb1"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadFull(resp.Body, make([]byte, 1000))
	cancel()
	resp.Body.Close()
	r := e.l.waitEnd(t)
	if r.Status != 200 || !strings.Contains(r.Error, "went away") {
		t.Errorf("recorded %+v", r)
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the provider's request was not cancelled")
	}
}

// A provider cutting its stream short is recorded as cut.
func TestUpstreamCut(t *testing.T) {
	e := newEnv(t, envOpts{anthropic: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, strings.SplitAfter(anthropicSSE, "\n\n")[0])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}})
	resp, _ := post(t, e.url, "/v1/messages", token("sb1"), []byte(`{"model":"m","stream":true,"messages":[]}`))
	if resp.StatusCode != 200 {
		t.Errorf("status %d", resp.StatusCode)
	}
	if r := e.l.waitEnd(t); r.Error == "" {
		t.Errorf("recorded %+v", r)
	}
}

// A call held by a paused run whose program goes away gets no answer and
// no record.
func TestPausedCallAbandoned(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.l.set(func(l *ledger) { l.hold = make(chan struct{}) })
	served := make(chan struct{})
	url := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(served)
		e.g.ServeHTTP(w, r)
	}), "sb1")
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/messages", strings.NewReader(hi))
	req.Header.Set("X-Api-Key", token("sb1"))
	go func() {
		for e.l.numCalls() == 0 { // held in Begin
			runtime.Gosched()
		}
		cancel()
	}()
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("a held call was answered")
	}
	<-served
	e.l.mu.Lock()
	defer e.l.mu.Unlock()
	if len(e.l.calls) != 1 || len(e.l.ends) != 0 {
		t.Errorf("calls %d ends %d", len(e.l.calls), len(e.l.ends))
	}
}

// The requests Claude Code and Codex really send (testdata, trimmed)
// read into reins' vocabulary.
func TestParseCaptured(t *testing.T) {
	for _, c := range []struct {
		file     string
		wire     Wire
		model    string
		tools    int
		lastText string
	}{
		{"testdata/claude-code-2.1.332-messages.json", WireAnthropic, "claude-opus-5-5", 4, "say hi"},
		{"testdata/codex-0.171.0-responses.json", WireOpenAIResponses, "gpt-5", 4, "say hi"},
	} {
		b, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		p, err := parse(c.wire, b)
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		last := p.req.Messages[len(p.req.Messages)-1]
		if p.model != c.model || !p.stream || len(p.req.Tools) != c.tools || p.req.System == "" ||
			last.Role != model.RoleUser || last.Content[len(last.Content)-1].Text != c.lastText {
			t.Errorf("%s: model %q stream %v tools %d system %d, last %+v", c.file, p.model, p.stream, len(p.req.Tools), len(p.req.System), last)
		}
		for _, m := range p.req.Messages {
			if m.Role != model.RoleUser && m.Role != model.RoleAssistant {
				t.Errorf("%s: role %q left in messages", c.file, m.Role)
			}
		}
	}
}

// One sandbox holds at most MaxInFlight calls open; the next is answered
// 429 before its body is read or the Ledger sees it, and every call goes
// through once the held ones finish. Body bytes held by all calls are
// bounded too.
func TestCallsInFlightBounded(t *testing.T) {
	e := newEnv(t, envOpts{anthropic: provider(anthropicJSON, anthropicSSE)})
	hold := make(chan struct{})
	e.l.set(func(l *ledger) { l.hold = hold })
	c := anthropicClient(e.url, token("sb1"))
	errs := make(chan error, MaxInFlight)
	for range MaxInFlight {
		go func() {
			_, err := c.Messages.New(context.Background(), aParams)
			errs <- err
		}()
	}
	for e.l.numCalls() < MaxInFlight {
		runtime.Gosched()
	}
	resp, body := post(t, e.url, "/v1/messages", token("sb1"), []byte(hi))
	if resp.StatusCode != 429 || !strings.Contains(string(body), "model calls open") {
		t.Errorf("call %d: %d %s", MaxInFlight+1, resp.StatusCode, body)
	}
	if n := e.l.numCalls(); n != MaxInFlight {
		t.Errorf("the ledger saw %d calls", n)
	}
	other := serve(t, e.g, "sb2") // another sandbox is not held back
	e.l.set(func(l *ledger) { l.hold = nil })
	if resp, body := post(t, other, "/v1/messages", token("sb2"), []byte(hi)); resp.StatusCode != 200 {
		t.Errorf("another sandbox: %d %s", resp.StatusCode, body)
	}
	close(hold)
	for range MaxInFlight {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if resp, body := post(t, e.url, "/v1/messages", token("sb1"), []byte(hi)); resp.StatusCode != 200 {
		t.Errorf("after: %d %s", resp.StatusCode, body)
	}

	e.g.mu.Lock()
	e.g.maxBuffered = int64(len(hi)) - 1
	e.g.mu.Unlock()
	if resp, body := post(t, e.url, "/v1/messages", token("sb1"), []byte(hi)); resp.StatusCode != 429 || !strings.Contains(string(body), "request bytes") {
		t.Errorf("over the bytes held: %d %s", resp.StatusCode, body)
	}
}

// heldBytes is the body bytes the gateway's open calls hold, all and of
// sandbox.
func (g *Gateway) heldBytes(sandbox string) (all, of int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buffered, g.held[sandbox]
}

// A program that opens calls of unknown length (chunked) and never sends
// their bodies holds MaxBody each: one sandbox may hold its share, not the
// whole of MaxBuffered, so that another sandbox's calls still go through.
func TestOneSandboxCannotHoldEveryBody(t *testing.T) {
	e := newEnv(t, envOpts{anthropic: provider(anthropicJSON, anthropicSSE)})
	addr := strings.TrimPrefix(e.url, "http://")
	head := "POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Api-Key: " + token("sb1") + "\r\nTransfer-Encoding: chunked\r\n\r\n"
	held, refused := 0, 0
	for range MaxInFlight {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		before, _ := e.g.heldBytes("sb1")
		io.WriteString(c, head)
		// Held (the bytes counted) or answered 429 at once.
		br := bufio.NewReader(c)
		for end := time.Now().Add(10 * time.Second); ; {
			if time.Now().After(end) {
				t.Fatal("a call neither held nor answered")
			}
			if now, _ := e.g.heldBytes("sb1"); now > before {
				held++
				break
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
			if line, err := br.ReadString('\n'); err == nil {
				if !strings.Contains(line, " 429 ") {
					t.Fatalf("a held body's call answered %q", line)
				}
				refused++
				break
			}
		}
	}
	if held*MaxBody > MaxBufferedPerSandbox || refused == 0 {
		t.Errorf("one sandbox holds %d calls of unknown length (%d refused)", held, refused)
	}
	other := serve(t, e.g, "sb2")
	if resp, body := post(t, other, "/v1/messages", token("sb2"), []byte(hi)); resp.StatusCode != 200 {
		t.Errorf("another sandbox's call while sb1 holds %d bodies: %d %s", held, resp.StatusCode, body)
	}
}

// A body sent slower than bodyTimeout (a slowloris) is answered 408 in
// the wire's format and gives back what its call held; nothing reaches
// the Ledger.
func TestSlowBodyAnswered(t *testing.T) {
	e := newEnv(t, envOpts{})
	defer func(d time.Duration) { bodyTimeout = d }(bodyTimeout)
	bodyTimeout = 300 * time.Millisecond
	c, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Api-Key: %s\r\nContent-Length: %d\r\n\r\n%s", token("sb1"), len(hi), hi[:10])
	c.SetDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("a slow body was not answered: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	var v struct{ Error struct{ Type string } }
	json.Unmarshal(body, &v)
	if resp.StatusCode != http.StatusRequestTimeout || v.Error.Type != "timeout_error" {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
	for all, _ := e.g.heldBytes("sb1"); all != 0; all, _ = e.g.heldBytes("sb1") {
		runtime.Gosched()
	}
	if n := e.l.numCalls(); n != 0 {
		t.Errorf("the ledger saw %d calls", n)
	}
}

// endingLedger is a ledger whose entries' run ends when ended is closed
// (an Ender).
type endingLedger struct {
	*ledger
	ended chan struct{}
}

type endingEntry struct {
	Entry
	ended chan struct{}
}

func (e endingEntry) Ended() <-chan struct{} { return e.ended }

func (l endingLedger) Begin(ctx context.Context, c Call) (Admission, error) {
	adm, err := l.ledger.Begin(ctx, c)
	if err == nil {
		adm.Entry = endingEntry{adm.Entry, l.ended}
	}
	return adm, err
}

// A run that ends (cancelled, over a budget) cuts its calls in flight: a
// stream the provider would send for ever ends, the provider's request is
// cancelled, and a call not yet answered is answered with a refusal.
func TestRunEndCutsCallsInFlight(t *testing.T) {
	for _, c := range []struct {
		what    string
		started bool
	}{{"streaming", true}, {"before the answer", false}} {
		t.Run(c.what, func(t *testing.T) {
			gone, arrived := make(chan struct{}), make(chan struct{})
			e := newEnv(t, envOpts{anthropic: func(w http.ResponseWriter, r *http.Request) {
				defer close(gone)
				if !c.started {
					io.ReadAll(r.Body) // so that the server sees its client go
					close(arrived)
					<-r.Context().Done()
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				for r.Context().Err() == nil {
					io.WriteString(w, "event: ping\ndata: {\"type\":\"ping\"}\n\n")
					w.(http.Flusher).Flush()
					time.Sleep(time.Millisecond)
				}
			}})
			l := endingLedger{e.l, make(chan struct{})}
			url := serve(t, mustNew(t, e.g.cfg, l), "sb1")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/messages", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
			req.Header.Set("X-Api-Key", token("sb1"))
			if !c.started {
				go func() {
					<-arrived
					close(l.ended)
				}()
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if c.started {
				io.ReadFull(resp.Body, make([]byte, 1000))
				close(l.ended)
				if _, err := io.Copy(io.Discard, resp.Body); ctx.Err() != nil {
					t.Fatalf("the stream went on after its run ended: %v", err)
				}
			} else {
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "run ended") {
					t.Errorf("%d %s", resp.StatusCode, body)
				}
			}
			select {
			case <-gone:
			case <-time.After(5 * time.Second):
				t.Fatal("the provider's request was not cancelled")
			}
			if r := e.l.waitEnd(t); !strings.Contains(r.Error, "run ended") {
				t.Errorf("recorded %+v", r)
			}
		})
	}
}

func mustNew(t *testing.T, cfg Config, l Ledger) *Gateway {
	t.Helper()
	cfg.Ledger = l
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// The key goes to the configured provider only: a request target in
// absolute form, a Host header, a query and a redirect from the provider
// do not send it (or the program) anywhere else, and a redirect's
// Location is not passed back.
func TestKeyGoesToTheProviderOnly(t *testing.T) {
	var evilHits, redirect atomic.Int32
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { evilHits.Add(1) }))
	defer evil.Close()
	e := newEnv(t, envOpts{anthropic: func(w http.ResponseWriter, r *http.Request) {
		if redirect.Load() == 1 {
			http.Redirect(w, r, evil.URL+"/v1/messages", http.StatusTemporaryRedirect)
			return
		}
		provider(anthropicJSON, anthropicSSE)(w, r)
	}})
	evilHost := strings.TrimPrefix(evil.URL, "http://")
	body := fmt.Sprintf("Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(hi), hi)
	for _, target := range []string{evil.URL + "/v1/messages", "/v1/messages?beta=true&url=" + evil.URL + "&host=" + evilHost} {
		got := rawOne(t, e.url, "POST "+target+" HTTP/1.1\r\nHost: "+evilHost+"\r\nConnection: close\r\nX-Api-Key: "+token("sb1")+"\r\n"+body)
		if !strings.Contains(got, " 200 OK") {
			t.Errorf("%s: %s", target, got)
		}
		r := e.anthropic.last(t)
		if r.Host != strings.TrimPrefix(e.anthropic.URL, "http://") || r.URL.Path != "/v1/messages" || (r.URL.RawQuery != "" && r.URL.RawQuery != "beta=true") {
			t.Errorf("%s reached the provider as Host %q %s", target, r.Host, r.URL)
		}
	}
	redirect.Store(1)
	got := rawOne(t, e.url, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Api-Key: "+token("sb1")+"\r\n"+body)
	if !strings.Contains(got, " 307 ") || strings.Contains(got, evilHost) {
		t.Errorf("a redirect from the provider: %s", got)
	}
	if n := evilHits.Load(); n != 0 {
		t.Errorf("the other host was hit %d times", n)
	}
}

// A provider's stream larger than the record keeps (each event small, so
// each passes the per-event bound) reaches the program whole, and what
// the gateway keeps of it for the record stops at maxRecord.
func TestHugeStreamRecordBounded(t *testing.T) {
	delta := `event: content_block_delta` + "\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"` + strings.Repeat("x", 32<<10) + `"}}` + "\n\n"
	n := maxRecord/(32<<10) + 64
	events := strings.SplitAfter(anthropicSSE, "\n\n")
	e := newEnv(t, envOpts{anthropic: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, events[0]+events[1]) // message_start, content_block_start
		for range n {
			io.WriteString(w, delta)
		}
		io.WriteString(w, strings.Join(events[2:], ""))
	}})
	req, _ := http.NewRequest(http.MethodPost, e.url+"/v1/messages", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
	req.Header.Set("X-Api-Key", token("sb1"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if got < int64(n*len(delta)) {
		t.Errorf("the program got %d bytes of a %d-byte stream", got, n*len(delta))
	}
	r := e.l.waitEnd(t)
	kept := 0
	if r.Response != nil {
		for _, b := range r.Response.Content {
			kept += len(b.Text)
		}
	}
	if kept > maxRecord || !strings.Contains(r.Error, "record keeps") {
		t.Errorf("the record kept %d bytes of content: %q", kept, r.Error)
	}
}

// The same for an answer that is not streamed: one JSON body larger than
// the record keeps reaches the program whole, and the record says why it
// has no content.
func TestHugeAnswerRecordBounded(t *testing.T) {
	pad := strings.Repeat("x", maxRecord+1)
	e := newEnv(t, envOpts{anthropic: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"`+pad+`"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`)
	}})
	req, _ := http.NewRequest(http.MethodPost, e.url+"/v1/messages", strings.NewReader(`{"model":"m","messages":[]}`))
	req.Header.Set("X-Api-Key", token("sb1"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if got < int64(len(pad)) {
		t.Errorf("the program got %d bytes of a %d-byte answer", got, len(pad))
	}
	if r := e.l.waitEnd(t); r.Response != nil || !strings.Contains(r.Error, "record keeps") {
		t.Errorf("the record of an answer past the bound: response %v, error %q", r.Response != nil, r.Error)
	}
}

// A program that hangs up once it has the stream's last event (Codex
// closes after response.completed) had the whole answer: the call is
// recorded whole, not as a program gone mid-answer, though the provider
// still sends a tail after it.
func TestHangUpAfterTheLastEvent(t *testing.T) {
	hungUp := make(chan struct{})
	e := newEnv(t, envOpts{anthropic: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, anthropicSSE)
		w.(http.Flusher).Flush()
		select {
		case <-hungUp:
		case <-r.Context().Done():
			return
		}
		// The tail: keep writing until the gateway's write to the gone
		// program fails and it stops reading.
		for i := 0; i < 1000 && r.Context().Err() == nil; i++ {
			io.WriteString(w, ": tail "+strings.Repeat("x", 4096)+"\n\n")
			w.(http.Flusher).Flush()
			time.Sleep(time.Millisecond)
		}
	}})
	req, _ := http.NewRequest(http.MethodPost, e.url+"/v1/messages", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
	req.Header.Set("X-Api-Key", token("sb1"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended before message_stop: %v", err)
		}
		if strings.HasPrefix(line, "data: {\"type\":\"message_stop\"") {
			break
		}
	}
	resp.Body.Close() // hang up, as Codex does
	close(hungUp)
	if r := e.l.waitEnd(t); r.Error != "" || r.Response == nil || r.Status != http.StatusOK {
		t.Errorf("a program that hung up after the last event is recorded %+v; want the whole answer, no error", r)
	}
}
