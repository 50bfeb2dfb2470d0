package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"
)

// MaxBody is the most of a request body the gateway reads: a long
// conversation with screenshots is a few MiB; a request larger than this
// is answered 413 in its wire's format.
const MaxBody = 32 << 20

// MaxInFlight is the most model calls one sandbox has open at once (Claude
// Code with subagents makes a few in parallel); past it a call is
// answered 429, which programs retry after a pause.
const MaxInFlight = 16

// MaxBuffered is the most request body bytes all calls hold at once: a
// call holds its Content-Length (MaxBody when it sends none) from before
// its body is read until it is answered; a call that would pass it is
// answered 429.
const MaxBuffered = 512 << 20

// MaxBufferedPerSandbox is the most of MaxBuffered one sandbox's calls
// hold at once (two calls of unknown length), so that one sandbox cannot
// take every other's share and have all their calls answered 429.
const MaxBufferedPerSandbox = MaxBuffered / 8

// bodyTimeout bounds the reading of one request body (MaxBody over the
// tunnel takes well under a second): a program sending its body slower
// than that is answered 408 and gives back the bytes it held, so that a
// few slow bodies cannot keep MaxBuffered taken for ever.
var bodyTimeout = time.Minute

// Gateway is the model gateway's HTTP handler (see the package comment).
// Routes, all matched on the cleaned path exactly:
//
//	HEAD /, GET /                    200, empty (programs probe the base URL)
//	HEAD /api/hello, GET /api/hello  200, empty (Claude Code's connectivity probe)
//	POST /v1/messages                Anthropic Messages, streamed or not
//	POST /v1/messages/count_tokens   answered here with an estimate (Estimate)
//	POST /v1/chat/completions        OpenAI Chat Completions, streamed or not
//	POST /v1/responses               OpenAI Responses, streamed or not
//	GET  /v1/models                  answered here: an empty list
//	POST /api/event_logging/batch    answered here: 200 {} (telemetry, dropped)
//	anything else                    404 in the wire's format, never forwarded
type Gateway struct {
	cfg    Config
	client *http.Client

	mu          sync.Mutex
	inFlight    map[string]int   // calls open, by sandbox
	held        map[string]int64 // body bytes held by open calls, by sandbox
	buffered    int64            // body bytes held by open calls
	maxBuffered int64
}

var _ http.Handler = (*Gateway)(nil)

// New checks cfg and returns a Gateway.
func New(cfg Config) (*Gateway, error) {
	if cfg.Ledger == nil || cfg.Authorize == nil {
		return nil, errors.New("gateway: a Ledger and an Authorize are required")
	}
	for name, u := range map[string]Upstream{"anthropic": cfg.Anthropic, "openai": cfg.OpenAI} {
		if u.BaseURL == "" {
			continue
		}
		p, err := url.Parse(u.BaseURL)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return nil, fmt.Errorf("gateway: %s base URL %q is not an http(s) URL", name, u.BaseURL)
		}
	}
	tr := &http.Transport{
		Proxy:               nil, // the service's own route to the provider, never an inherited proxy
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		// Headers come within this; a body may then stream for as long
		// as the model thinks, bounded by the call's ctx.
		ResponseHeaderTimeout: 10 * time.Minute,
	}
	return &Gateway{cfg: cfg, inFlight: map[string]int{}, held: map[string]int64{}, maxBuffered: MaxBuffered, client: &http.Client{
		Transport: tr,
		// A redirect from a provider is passed back, never followed with
		// the key.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}, nil
}

// route is what a cleaned path and method name.
type route int

const (
	routeNone route = iota
	routeRoot
	routeMessages
	routeCount
	routeChat
	routeResponses
	routeModels
	routeTelemetry
)

func routeOf(method, p string) route {
	switch {
	case (p == "/" || p == "/api/hello") && (method == http.MethodGet || method == http.MethodHead):
		return routeRoot
	case method == http.MethodGet && p == "/v1/models":
		return routeModels
	case method != http.MethodPost:
		return routeNone
	}
	switch p {
	case "/v1/messages":
		return routeMessages
	case "/v1/messages/count_tokens":
		return routeCount
	case "/v1/chat/completions":
		return routeChat
	case "/v1/responses":
		return routeResponses
	case "/api/event_logging/batch":
		return routeTelemetry
	}
	return routeNone
}

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt := routeNone
	// The path is taken as sent; one that cleaning changes ("/v1/x/../messages",
	// "//v1/messages", an escaped slash) is no route.
	if p := r.URL.EscapedPath(); p == r.URL.Path && path.Clean(p) == p {
		rt = routeOf(r.Method, p)
	}
	wire := guessWire(r)
	switch rt {
	case routeMessages, routeCount:
		wire = WireAnthropic
	case routeChat:
		wire = WireOpenAIChat
	case routeResponses:
		wire = WireOpenAIResponses
	}
	// An answer given before the body is read closes the connection:
	// else the server would wait, with no deadline, to discard a body
	// that a program need never send.
	if r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
	}
	switch rt {
	case routeRoot:
		w.WriteHeader(http.StatusOK)
		return
	case routeNone:
		writeError(w, wire, http.StatusNotFound, "not_found_error",
			fmt.Sprintf("reins' model gateway answers model calls only (POST /v1/messages, /v1/chat/completions, /v1/responses); %s %s is not served and was not forwarded", r.Method, r.URL.Path))
		return
	case routeTelemetry:
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, "{}")
		return
	}
	sandbox, ok := g.authorize(r)
	if !ok {
		writeError(w, wire, http.StatusUnauthorized, "authentication_error",
			"the key is not this sandbox's model gateway token: use the ANTHROPIC_API_KEY / OPENAI_API_KEY the sandbox was given, from inside that sandbox")
		return
	}
	if rt == routeModels {
		writeModels(w, r)
		return
	}
	release, busy := g.hold(sandbox, r.ContentLength)
	if busy != "" {
		writeError(w, wire, http.StatusTooManyRequests, "rate_limit_error", busy)
		return
	}
	defer release()
	body, ok := readBody(w, r, wire)
	if !ok {
		return
	}
	w.Header().Del("Connection")
	p, err := parse(wire, body)
	if err != nil {
		writeError(w, wire, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	if rt == routeCount {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"input_tokens":%d}`, Estimate(p.req))
		return
	}
	g.call(w, r, sandbox, wire, body, p)
}

// hold counts one call of sandbox, holding n body bytes (MaxBody when n
// is unknown), or says why it cannot be taken now.
func (g *Gateway) hold(sandbox string, n int64) (release func(), busy string) {
	if n < 0 || n > MaxBody {
		n = MaxBody
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.inFlight[sandbox] >= MaxInFlight:
		return nil, fmt.Sprintf("this sandbox has %d model calls open, the most it may: retry when one has finished", MaxInFlight)
	case g.buffered+n > g.maxBuffered:
		return nil, "reins' model gateway is holding all the request bytes it may: retry shortly"
	case g.held[sandbox]+n > MaxBufferedPerSandbox:
		return nil, fmt.Sprintf("this sandbox's open model calls hold %d MiB of request bodies, the most one sandbox may: retry when one has finished", g.held[sandbox]>>20)
	}
	g.inFlight[sandbox]++
	g.held[sandbox] += n
	g.buffered += n
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.buffered -= n
		if g.held[sandbox] -= n; g.held[sandbox] == 0 {
			delete(g.held, sandbox)
		}
		if g.inFlight[sandbox]--; g.inFlight[sandbox] == 0 {
			delete(g.inFlight, sandbox)
		}
	}, ""
}

// guessWire is the wire a request's errors are written in before its
// route says: OpenAI's for its paths or a bearer token alone, else
// Anthropic's.
func guessWire(r *http.Request) Wire {
	if strings.HasPrefix(r.URL.Path, "/v1/chat/") || strings.HasPrefix(r.URL.Path, "/v1/responses") ||
		(r.Header.Get("X-Api-Key") == "" && r.Header.Get("Anthropic-Version") == "" && r.Header.Get("Authorization") != "") {
		return WireOpenAIChat
	}
	return WireAnthropic
}

// authorize finds the request's token and asks Config.Authorize whether
// it is the placeholder of the sandbox the connection came from. Two
// tokens that differ, or a header given twice, are refused.
func (g *Gateway) authorize(r *http.Request) (string, bool) {
	sandbox := SandboxFrom(r.Context())
	if sandbox == "" {
		return "", false
	}
	var tokens []string
	keys := r.Header.Values("X-Api-Key")
	auths := r.Header.Values("Authorization")
	if len(keys) > 1 || len(auths) > 1 {
		return "", false
	}
	if len(keys) == 1 {
		tokens = append(tokens, keys[0])
	}
	if len(auths) == 1 {
		scheme, tok, ok := strings.Cut(auths[0], " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return "", false
		}
		tokens = append(tokens, tok)
	}
	if len(tokens) == 0 || (len(tokens) == 2 && tokens[0] != tokens[1]) {
		return "", false
	}
	if tokens[0] == "" || !g.cfg.Authorize(r.Context(), sandbox, tokens[0]) {
		return "", false
	}
	return sandbox, true
}

// readBody reads the whole request body, at most MaxBody; it answers the
// request itself when it cannot.
func readBody(w http.ResponseWriter, r *http.Request, wire Wire) ([]byte, bool) {
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		writeError(w, wire, http.StatusUnsupportedMediaType, "invalid_request_error",
			"the model gateway takes request bodies uncompressed (Content-Encoding "+ce+" is not accepted)")
		return nil, false
	}
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(bodyTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	rc.SetReadDeadline(time.Time{})
	var tooBig *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &tooBig):
		writeError(w, wire, http.StatusRequestEntityTooLarge, "request_too_large",
			fmt.Sprintf("the request is larger than the model gateway's %d MiB: send a shorter conversation", MaxBody>>20))
		return nil, false
	case errors.As(err, &ne) && ne.Timeout():
		writeError(w, wire, http.StatusRequestTimeout, "timeout_error",
			fmt.Sprintf("the request's body did not arrive within %s: send it whole, at once", bodyTimeout))
		return nil, false
	case err != nil:
		return nil, false // the program went away
	}
	return body, true
}

// writeModels answers GET /v1/models: the gateway lists no models (which
// model answers is the sandbox's operator's choice, not the program's),
// in the format of the wire that asked.
func writeModels(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if guessWire(r) == WireAnthropic {
		io.WriteString(w, `{"data":[],"has_more":false,"first_id":null,"last_id":null}`)
		return
	}
	io.WriteString(w, `{"object":"list","data":[]}`)
}

// writeError answers in wire's error format.
func writeError(w http.ResponseWriter, wire Wire, status int, typ, msg string) {
	var v any
	if wire == WireAnthropic {
		v = map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}}
	} else {
		e := map[string]any{"message": msg, "type": openAIType(status, typ), "param": nil, "code": typ}
		if status == http.StatusUnauthorized {
			e["code"] = "invalid_api_key"
		}
		v = map[string]any{"error": e}
	}
	b, _ := json.Marshal(v)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(b)
}

// openAIType is OpenAI's error type for a status: its API says
// invalid_request_error for most 4xx.
func openAIType(status int, typ string) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	case typ == "permission_error":
		return "permission_error"
	}
	return "invalid_request_error"
}

// id is a fresh id for a synthesized response ("msg_…").
func id(prefix string) string {
	var b [12]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// logger is the gateway's log with the sandbox attached.
func logger(ctx context.Context) *slog.Logger {
	return slog.Default().With("sandbox", SandboxFrom(ctx), "component", "gateway")
}

// jsonString is s as a JSON string.
func jsonString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	return bytes.TrimRight(b.Bytes(), "\n")
}
