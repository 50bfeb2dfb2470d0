package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// PortDialer is the optional part of an Executor that reaches TCP ports on
// its sandbox's loopback (client.Client.DialPort).
type PortDialer interface {
	DialPort(ctx context.Context, port int) (net.Conn, error)
}

// PortConnsPerSandbox bounds the requests and WebSockets in flight through
// one sandbox's port URLs; more are refused with 503 at once. Each holds
// a connection to the executor and one inside the sandbox.
const PortConnsPerSandbox = 128

// WithPorts serves port URLs (Ports) besides the API.
func (s *Server) WithPorts(p *Ports) *Server {
	s.ports = p
	s.portProxy = &httputil.ReverseProxy{
		Rewrite:        s.rewritePort,
		Transport:      s.portTransport(),
		FlushInterval:  -1, // stream: server-sent events, long polls
		ModifyResponse: dropReinsCookies,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			portText(w, http.StatusBadGateway, s.portDown(r.Context(), err))
		},
	}
	return s
}

// portTransport dials the executor of the sandbox the request's URL names
// (PORT-ID.port, set by rewritePort): keep-alive connections are pooled
// per sandbox and port.
func (s *Server) portTransport() *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, _, _ := net.SplitHostPort(addr)
			ps, id, _ := strings.Cut(strings.TrimSuffix(host, ".port"), "-")
			port, _ := strconv.Atoi(ps)
			ex, err := s.m.Executor(ctx, "", id)
			if err != nil {
				return nil, err
			}
			d, ok := ex.(PortDialer)
			if !ok {
				return nil, errdefs.WithMessage(errdefs.ErrUnimplemented, "this sandbox's backend cannot reach its ports")
			}
			c, err := d.DialPort(ctx, port)
			if err != nil {
				// DialPort's words are the sandbox's, fit to show.
				return nil, &portDialError{msg: err.Error(), err: err}
			}
			return c, nil
		},
		MaxIdleConnsPerHost:    16,
		MaxResponseHeaderBytes: 1 << 20, // the sandbox answers: bounded
		IdleConnTimeout:        90 * time.Second,
		ResponseHeaderTimeout:  0, // a long poll may take its time
		DisableCompression:     true,
	}
}

// portDialError is a failed DialPort, whose message may be shown.
type portDialError struct {
	msg string
	err error
}

func (e *portDialError) Error() string { return e.msg }
func (e *portDialError) Unwrap() error { return e.err }

type portKey struct{}

type portTarget struct {
	id   string
	port int
	// bearer: the Authorization header was the reins token, not the app's.
	bearer bool
}

// servePorts answers requests whose host is a port host; it reports false
// for any other host, which the API serves.
func (s *Server) servePorts(w http.ResponseWriter, r *http.Request) bool {
	if s.ports == nil {
		return false
	}
	id, port, under, ok := s.ports.parseHost(r.Host)
	if !under {
		return false
	}
	if !ok {
		portText(w, http.StatusNotFound, errNoPort.Error())
		return true
	}
	if v := r.URL.Query().Get(linkParam); v != "" {
		s.takeLink(w, r, id, port, v)
		return true
	}
	tn, bearer, err := s.portCaller(r, id, port)
	if err != nil {
		portText(w, http.StatusUnauthorized, err.Error())
		return true
	}
	// Executor checks the tenant and marks the sandbox active, on every
	// request (the proxy's pooled connections skip the dial).
	if _, err := s.m.Executor(r.Context(), tn, id); err != nil {
		rec, gerr := s.m.Get(r.Context(), tn, id)
		switch {
		case gerr != nil:
			portText(w, http.StatusNotFound, errNoPort.Error())
		case rec.State != sandbox.StateRunning:
			portText(w, http.StatusBadGateway, notRunning(rec))
		default:
			portText(w, http.StatusBadGateway, s.portDown(context.WithValue(r.Context(), portKey{}, portTarget{id: id, port: port}), err))
		}
		return true
	}
	release, ok := s.portSlots.take(id)
	if !ok {
		portText(w, http.StatusServiceUnavailable, fmt.Sprintf(
			"sandbox %s has %d requests open through its port URLs, the most it may: retry when some end", id, PortConnsPerSandbox))
		return true
	}
	defer release()
	ctx := context.WithValue(r.Context(), portKey{}, portTarget{id, port, bearer})
	s.portProxy.ServeHTTP(w, r.WithContext(ctx))
	return true
}

var (
	errNoPort    = errors.New("no such sandbox port: check the URL (`reins sandbox port ID PORT` prints it)")
	errPortCreds = errors.New("this URL needs a reins token: send \"Authorization: Bearer TOKEN\" or a " + tokenCookie +
		" cookie, or open a link from `reins sandbox port ID PORT --public`")
)

// portCaller is the tenant a request speaks for: its bearer token, its
// token cookie, or ("" and bearer false) a good link cookie for id and
// port. bearer reports that the Authorization header held the token.
func (s *Server) portCaller(r *http.Request, id string, port int) (tenant string, bearer bool, err error) {
	// An application's own Authorization (not a reins token) is the
	// sandbox's business: no token lookup for it on every request.
	if h := r.Header.Get("Authorization"); reinsBearer(h) {
		if tn, err := s.authenticate(r.Context(), h); err == nil {
			return tn, true, nil
		}
	}
	if c, err := r.Cookie(tokenCookie); err == nil {
		if tn, err := s.authenticate(r.Context(), "Bearer "+c.Value); err == nil {
			return tn, false, nil
		}
	}
	if c, err := r.Cookie(linkCookie); err == nil {
		if _, ok := s.ports.verify(c.Value, id, port, time.Now()); ok {
			return "", false, nil
		}
	}
	return "", false, errPortCreds
}

// takeLink turns a good public link into a cookie for this host only and
// redirects to the URL without it, so the link's secret leaves the address
// bar and the sandbox never sees it. A bad or expired link is as no
// credentials at all.
func (s *Server) takeLink(w http.ResponseWriter, r *http.Request, id string, port int, link string) {
	expires, ok := s.ports.verify(link, id, port, time.Now())
	if !ok {
		portText(w, http.StatusUnauthorized, errPortCreds.Error())
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: linkCookie, Value: link, Path: "/", Expires: expires,
		HttpOnly: true, SameSite: http.SameSiteLaxMode,
	})
	u := *r.URL
	q := u.Query()
	q.Del(linkParam)
	u.RawQuery = q.Encode()
	code := http.StatusFound
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		code = http.StatusTemporaryRedirect
	}
	http.Redirect(w, r, u.RequestURI(), code)
}

// rewritePort sends the request to the sandbox as it came, less reins'
// credentials: the token (header or cookie), the link cookie and
// parameter never reach the sandbox.
func (s *Server) rewritePort(pr *httputil.ProxyRequest) {
	t := pr.In.Context().Value(portKey{}).(portTarget)
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = strconv.Itoa(t.port) + "-" + t.id + ".port"
	pr.Out.Host = pr.In.Host // dev servers check it
	if t.bearer || reinsBearer(pr.Out.Header.Get("Authorization")) {
		pr.Out.Header.Del("Authorization")
	}
	stripReinsCookies(pr.Out.Header)
	if q := pr.Out.URL.Query(); q.Has(linkParam) {
		q.Del(linkParam)
		pr.Out.URL.RawQuery = q.Encode()
	}
}

// reinsCookie names the cookies the service reads.
func reinsCookie(name string) bool { return name == tokenCookie || name == linkCookie }

// stripReinsCookies rewrites the Cookie headers without reins' cookies.
func stripReinsCookies(h http.Header) {
	if len(h.Values("Cookie")) == 0 {
		return
	}
	cookies := (&http.Request{Header: h}).Cookies()
	h.Del("Cookie")
	var kept []string
	for _, c := range cookies {
		if !reinsCookie(c.Name) {
			kept = append(kept, c.Name+"="+c.Value)
		}
	}
	if len(kept) > 0 {
		h.Set("Cookie", strings.Join(kept, "; "))
	}
}

// dropReinsCookies keeps a sandbox from setting (or shadowing) reins'
// cookies.
func dropReinsCookies(resp *http.Response) error {
	var kept []string
	for _, line := range resp.Header.Values("Set-Cookie") {
		if c, err := http.ParseSetCookie(line); err == nil && reinsCookie(c.Name) {
			continue
		}
		kept = append(kept, line)
	}
	resp.Header["Set-Cookie"] = kept
	if len(kept) == 0 {
		resp.Header.Del("Set-Cookie")
	}
	return nil
}

// portDown explains a failed proxied request: the sandbox's fate if it
// ended, else what the executor said (in the sandbox's words, which name
// nothing of the host), else that it did not answer.
func (s *Server) portDown(ctx context.Context, err error) string {
	t, _ := ctx.Value(portKey{}).(portTarget)
	gctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if rec, ok := s.m.Ended(gctx, "", t.id); ok {
		return notRunning(rec)
	}
	var de *portDialError
	if errors.As(err, &de) {
		return de.msg
	}
	return fmt.Sprintf("port %d of sandbox %s did not answer: is the server in the sandbox running?", t.port, t.id)
}

func notRunning(rec sandbox.Info) string {
	if rec.State == sandbox.StateStopped {
		msg := fmt.Sprintf("sandbox %s stopped (%s", rec.ID, rec.Reason)
		if rec.Message != "" {
			msg += ": " + rec.Message
		}
		return msg + "): its ports are gone; create a new sandbox"
	}
	return fmt.Sprintf("sandbox %s is %s: resume it to reach its ports", rec.ID, rec.State)
}

// portText answers in plain words, for browsers and curl alike.
func portText(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	io.WriteString(w, msg+"\n")
}

// portSlots counts the requests in flight per sandbox.
type portSlots struct {
	mu sync.Mutex
	n  map[string]int
}

func (p *portSlots) take(id string) (release func(), ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == nil {
		p.n = map[string]int{}
	}
	if p.n[id] >= PortConnsPerSandbox {
		return nil, false
	}
	p.n[id]++
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.n[id]--; p.n[id] == 0 {
			delete(p.n, id)
		}
	}, true
}

// PortURL returns the URL of a port of one of the caller's sandboxes.
func (s *Server) PortURL(ctx context.Context, req *connect.Request[reinsv1.PortURLRequest]) (*connect.Response[reinsv1.PortURLResponse], error) {
	if s.ports == nil {
		return nil, errdefs.WithMessage(errdefs.ErrUnimplemented, "this service serves no port URLs")
	}
	expires, err := checkPortRequest(req.Msg.Port, req.Msg.Public, time.Duration(req.Msg.TtlMs)*time.Millisecond, time.Now())
	if err != nil {
		return nil, err
	}
	rec, err := s.m.Get(ctx, tenant(ctx), req.Msg.Id)
	if err != nil {
		return nil, err
	}
	if rec.State == sandbox.StateStopped {
		return nil, fmt.Errorf("%s: %w", notRunning(rec), errdefs.ErrFailedPrecondition)
	}
	resp := &reinsv1.PortURLResponse{Url: s.ports.URL(rec.ID, int(req.Msg.Port), expires)}
	if !expires.IsZero() {
		resp.ExpiresUnixNano = expires.UnixNano()
	}
	return connect.NewResponse(resp), nil
}
