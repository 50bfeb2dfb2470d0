package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/model"
)

// StatusClientGone is the Result.Status of a call whose program went
// away before it was answered (nginx's 499: no status reached anyone).
const StatusClientGone = 499

// call admits one model call with the Ledger, sends it to its target and
// records what it came to, exactly once.
func (g *Gateway) call(w http.ResponseWriter, r *http.Request, sandbox string, wire Wire, body []byte, p *parsed) {
	ctx := r.Context()
	adm, err := g.cfg.Ledger.Begin(ctx, Call{Sandbox: sandbox, Wire: wire, Model: p.model, Stream: p.stream, Request: p.req})
	if err != nil {
		if ctx.Err() != nil {
			return // the program went away while the run was paused
		}
		var ref *Refusal
		if errors.As(err, &ref) {
			status, typ := ref.Status, ref.Type
			if status < 400 || status > 499 {
				status = http.StatusForbidden
			}
			if typ == "" {
				typ = "permission_error"
			}
			writeError(w, wire, status, typ, ref.Message)
			return
		}
		logger(ctx).Error("admitting a model call", "err", err)
		writeError(w, wire, http.StatusInternalServerError, "api_error", "reins could not admit this model call (its record failed): try again")
		return
	}
	var ended <-chan struct{}
	if en, ok := adm.Entry.(Ender); ok {
		ended = en.Ended()
		var cut context.CancelFunc
		ctx, cut = context.WithCancel(ctx)
		defer cut()
		go func() {
			select {
			case <-ended:
				cut()
			case <-ctx.Done():
			}
		}()
	}
	start := time.Now()
	rec := &recorder{w: w, start: start}
	res, returned := Result{}, false
	defer func() {
		// End is called exactly once, a panic (http.ErrAbortHandler) included.
		if !returned {
			res.Error = "the call was aborted"
		}
		res.Status, res.FirstByte, res.Duration = rec.status, rec.first, time.Since(start)
		if res.Status == 0 {
			res.Status = StatusClientGone
		}
		if adm.Entry != nil {
			adm.Entry.End(context.WithoutCancel(ctx), res)
		}
	}()
	res = g.dispatch(ctx, rec, r, wire, body, p, adm.Target)
	returned = true
	if isClosed(ended) && r.Context().Err() == nil {
		res.Error = "cut: the run ended while the call was in flight"
		if rec.status == 0 {
			writeError(rec, wire, http.StatusForbidden, "permission_error", "reins: the run ended while this model call was in flight; it takes no more model calls. Stop here.")
		}
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// dispatch forwards the call or translates it, by its target.
func (g *Gateway) dispatch(ctx context.Context, w *recorder, r *http.Request, wire Wire, body []byte, p *parsed, t Target) Result {
	own := "openai"
	if wire == WireAnthropic {
		own = "anthropic"
	}
	if t.Model == "" {
		return g.forward(ctx, w, r, wire, own, "", body, p)
	}
	provider, name, err := model.Parse(t.Model)
	if err != nil {
		msg := "the model this sandbox is given is not a model spec: ask its operator (" + err.Error() + ")"
		writeError(w, wire, http.StatusInternalServerError, "api_error", msg)
		return Result{Error: msg}
	}
	if provider == own {
		return g.forward(ctx, w, r, wire, own, name, body, p)
	}
	return g.translate(ctx, w, wire, p, t, name)
}

// The request headers a forwarded call carries, besides the key: the
// provider's protocol headers and the body's type; never the sandbox's
// token, cookies, or anything else the program sent.
var forwardHeaders = map[Wire][]string{
	WireAnthropic:       {"Anthropic-Version", "Anthropic-Beta", "Content-Type", "Accept"},
	WireOpenAIChat:      {"Content-Type", "Accept"},
	WireOpenAIResponses: {"Content-Type", "Accept", "Openai-Beta"},
}

// The response headers passed back: the body's type, and what a client
// needs to back off and to report a request to the provider.
func keepResponseHeader(k string) bool {
	switch k = strings.ToLower(k); {
	case k == "content-type", k == "retry-after", k == "request-id", k == "x-request-id",
		strings.HasPrefix(k, "anthropic-ratelimit-"), strings.HasPrefix(k, "x-ratelimit-"):
		return true
	}
	return false
}

// forward sends body as it is to the provider of the call's wire with the
// real key (the model field rewritten to name when the target names one)
// and streams the answer back as it comes, tee'd into the record.
func (g *Gateway) forward(ctx context.Context, w *recorder, r *http.Request, wire Wire, provider, name string, body []byte, p *parsed) Result {
	up, envVar := g.cfg.OpenAI, "OPENAI_API_KEY"
	if provider == "anthropic" {
		up, envVar = g.cfg.Anthropic, "ANTHROPIC_API_KEY"
	}
	asked := p.model
	if name != "" && name != p.model {
		b, err := rewriteModel(body, name)
		if err != nil {
			writeError(w, wire, http.StatusBadRequest, "invalid_request_error", err.Error())
			return Result{Error: err.Error()}
		}
		body, asked = b, name
	}
	res := Result{Upstream: provider + ":" + asked}
	if up.Key == "" || up.BaseURL == "" {
		res.Error = fmt.Sprintf("reins has no %s key: the operator of reins serve configures none, so this sandbox's %s calls cannot be made; ask them to set %s where reins serve runs, or to give the sandbox a model of another provider",
			provider, provider, envVar)
		writeError(w, wire, http.StatusForbidden, "permission_error", res.Error)
		return res
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, upstreamURL(up.BaseURL, wire, r), bytes.NewReader(body))
	if err != nil {
		res.Error = err.Error()
		writeError(w, wire, http.StatusInternalServerError, "api_error", "reins could not build the provider's request")
		return res
	}
	for _, h := range forwardHeaders[wire] {
		for _, v := range r.Header.Values(h) {
			req.Header.Add(h, v)
		}
	}
	if provider == "anthropic" {
		req.Header.Set("X-Api-Key", up.Key)
	} else {
		req.Header.Set("Authorization", "Bearer "+up.Key)
	}
	req.Header.Set("User-Agent", "reins-gateway")
	resp, err := g.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			res.Error = "the program went away before the provider answered"
			return res
		}
		// The cause names the provider's address: the service's log has
		// it, the run's record (which its tenant reads) does not.
		res.Error = "the provider could not be reached"
		logger(ctx).Warn("forwarding a model call", "err", err)
		writeError(w, wire, http.StatusBadGateway, "api_error", "reins could not reach the model provider: try again")
		return res
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		if keepResponseHeader(k) {
			w.Header()[k] = vs
		}
	}
	w.WriteHeader(resp.StatusCode)
	acc := newAccumulator(wire, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"))
	cerr := pump(ctx, w, resp.Body, acc)
	res.Response, res.Error = acc.result()
	switch {
	case resp.StatusCode/100 != 2:
		res.Response = nil
		res.Error = fmt.Sprintf("the provider answered %d: %s", resp.StatusCode, acc.errorText())
	case cerr != nil:
		res.Error = cerr.Error()
	}
	return res
}

// pump copies the provider's body to the program as it arrives, one
// flush per read, and into acc; it stops when either side ends. A program
// that hangs up once it has the stream's last event (Codex does, after
// response.completed) had the whole answer: what it did not read is the
// stream's tail, and the call is no failure.
func pump(ctx context.Context, w *recorder, body io.Reader, acc accumulator) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			whole := acc.ended()
			acc.Write(buf[:n])
			if _, werr := w.Write(buf[:n]); werr != nil {
				if whole {
					return nil
				}
				return errors.New("the program went away mid-answer: " + werr.Error())
			}
			w.Flush()
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				if acc.ended() { // sent whole before the program hung up
					return nil
				}
				return errors.New("the program went away mid-answer")
			}
			return errors.New("the provider's answer was cut: " + err.Error())
		}
	}
}

// upstreamURL is the provider's URL for the call: Anthropic's base URL
// is the host ("https://api.anthropic.com") and takes the path whole;
// OpenAI's includes /v1 ("https://api.openai.com/v1") and takes the rest.
// Of the query only Anthropic's beta=true (the SDK's beta marker) is kept.
func upstreamURL(base string, wire Wire, r *http.Request) string {
	base = strings.TrimRight(base, "/")
	if wire != WireAnthropic {
		return base + strings.TrimPrefix(r.URL.Path, "/v1")
	}
	u := base + r.URL.Path
	if r.URL.Query().Get("beta") == "true" {
		u += "?beta=true"
	}
	return u
}

// rewriteModel is body with its "model" field set to name.
func rewriteModel(body []byte, name string) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, errors.New("the request body is not a JSON object")
	}
	fields["model"] = jsonString(name)
	return json.Marshal(fields)
}

// translate answers the call with a model of reins' (another provider,
// script:), written back in the call's wire.
func (g *Gateway) translate(ctx context.Context, w *recorder, wire Wire, p *parsed, t Target, name string) Result {
	res := Result{Upstream: t.Model}
	if g.cfg.Open == nil {
		res.Error = "this gateway opens no models of reins"
		writeError(w, wire, http.StatusInternalServerError, "api_error", "reins could not open the model this sandbox is given: ask its operator")
		return res
	}
	m, label, err := g.cfg.Open(t)
	if err != nil {
		res.Error = err.Error()
		writeError(w, wire, http.StatusInternalServerError, "api_error", "reins could not open the model this sandbox is given: "+err.Error())
		return res
	}
	if strings.Contains(label, ":") { // Open's name for what answers, when it is a spec
		res.Upstream = label
	}
	req := *p.req
	req.Model = name
	out, st, err := generate(ctx, w, wire, p, m, &req)
	switch {
	case err != nil:
		res.Error = err.Error()
		if ctx.Err() != nil {
			return res
		}
		status, typ := statusOf(err)
		if st != nil {
			st.fail(status, typ, err.Error())
		} else {
			writeError(w, wire, status, typ, err.Error())
		}
		return res
	case st != nil:
		st.finish(out)
		err = st.err
	default:
		err = render(w, wire, p, out)
	}
	res.Response = out
	if err != nil {
		res.Error = "the program went away mid-answer: " + err.Error()
	}
	return res
}

// Keep-alive of a slow translated stream: model.Model answers whole, so a
// long answer (minutes for a large output) would leave a streaming
// program with no byte, and programs give up on a silent stream. Past
// keepAliveAfter the stream is opened and pinged every keepAliveEvery.
var keepAliveAfter, keepAliveEvery = 5 * time.Second, 10 * time.Second

// generate runs the model; when the call streams and the model is slow it
// opens the stream and keeps it alive meanwhile, returning it (st) for
// the answer or the error to end.
func generate(ctx context.Context, w *recorder, wire Wire, p *parsed, m model.Model, req *model.Request) (*model.Response, *stream, error) {
	type answer struct {
		r   *model.Response
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := m.Generate(ctx, req)
		done <- answer{r, err}
	}()
	if !p.stream {
		a := <-done
		return a.r, nil, a.err
	}
	var st *stream
	t := time.NewTimer(keepAliveAfter)
	defer t.Stop()
	for {
		select {
		case a := <-done:
			return a.r, st, a.err
		case <-t.C:
			if st == nil {
				st = newStream(w, wire, p)
				st.open(model.Usage{})
			}
			st.ping()
			t.Reset(keepAliveEvery)
		}
	}
}

// statusOf is the HTTP status and Anthropic error type of a model's
// error, by its errdefs kind.
func statusOf(err error) (int, string) {
	switch errdefs.Kind(err) {
	case errdefs.ErrInvalidArgument, errdefs.ErrFailedPrecondition:
		return http.StatusBadRequest, "invalid_request_error"
	case errdefs.ErrNotFound:
		return http.StatusNotFound, "not_found_error"
	case errdefs.ErrPermissionDenied, errdefs.ErrUnauthenticated:
		// The operator's key was refused: the program's own is fine.
		return http.StatusForbidden, "permission_error"
	case errdefs.ErrTooLarge:
		return http.StatusRequestEntityTooLarge, "request_too_large"
	case errdefs.ErrResourceExhausted:
		return http.StatusTooManyRequests, "rate_limit_error"
	case errdefs.ErrTimeout:
		return http.StatusGatewayTimeout, "api_error"
	case errdefs.ErrUnavailable:
		return http.StatusServiceUnavailable, "overloaded_error"
	}
	return http.StatusInternalServerError, "api_error"
}

// recorder is the program's ResponseWriter, noting the status it got and
// when its first byte went.
type recorder struct {
	w      http.ResponseWriter
	start  time.Time
	status int
	first  time.Duration
	wrote  bool
}

func (r *recorder) Header() http.Header { return r.w.Header() }

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.w.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if !r.wrote {
		r.wrote = true
		r.first = time.Since(r.start)
	}
	return r.w.Write(b)
}

func (r *recorder) Flush() {
	http.NewResponseController(r.w).Flush()
}
