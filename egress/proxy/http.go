package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/reinsdev/reins/egress"
)

// ServeHTTP serves the explicit proxy (HTTP_PROXY, HTTPS_PROXY) on l:
// absolute-form HTTP requests, and CONNECT. It returns nil once Close
// stops it.
func (p *Proxy) ServeHTTP(l net.Listener) error {
	return p.serve(l, func(c net.Conn, st *sandboxState) {
		p.handle(c, st, func(f *flow, r *limitedReader, br *bufio.Reader) {
			f.serveHTTP(r, br, c, httpMode{explicit: true})
		})
	})
}

// handle runs one client connection as a flow, or refuses it over the
// sandbox's cap.
func (p *Proxy) handle(c net.Conn, st *sandboxState, run func(*flow, *limitedReader, *bufio.Reader)) {
	f, err := p.open(st, c)
	if err != nil {
		p.log.Warn("egress proxy: connection refused", "sandbox", st.id, "err", err)
		p.emit(egress.Entry{Time: time.Now(), Sandbox: st.id, Proto: "tcp", Rule: "too many open connections (limit " + strconv.Itoa(p.cfg.MaxConns) + ")"})
		c.SetWriteDeadline(time.Now().Add(time.Second))
		io.WriteString(c, refusal(http.StatusServiceUnavailable, "this sandbox has "+strconv.Itoa(p.cfg.MaxConns)+" connections open, the limit: close some and retry"))
		c.Close()
		return
	}
	defer f.done()
	lr := &limitedReader{r: c, n: math.MaxInt64}
	run(f, lr, bufio.NewReaderSize(lr, 16<<10))
}

// httpMode says how the HTTP loop finds each request's target.
type httpMode struct {
	explicit bool   // absolute-form requests to the explicit proxy
	port     int    // origin-form: the connection's port
	sni      string // terminated TLS: the name every request must be for
	fallback target // origin-form without Host: the connection's target
	// up is a connection already made (a CONNECT's), for the first
	// request to its target.
	up *upstream
}

// upstream is a connection to an upstream host, kept across requests to
// the same target.
type upstream struct {
	conn    net.Conn
	lim     *limitedReader // under br: bounds a response's headers
	br      *bufio.Reader
	t       target
	addr    netip.AddrPort
	trusted bool
	rule    string
	// scrub are the secrets injected into the request now in flight,
	// whose values are taken out of its response's headers.
	scrub []Secret
}

// maxResponseHeader bounds the headers of a response from upstream (as
// MaxHeaderBytes bounds a request's): an upstream that sends them without
// end must not fill the service's memory.
const maxResponseHeader = 1 << 20

// newUpstream is an upstream over c, for HTTP.
func newUpstream(c net.Conn, t target, addr netip.AddrPort, d decision) *upstream {
	up := &upstream{t: t, addr: addr, trusted: d.trusted, rule: d.Rule}
	up.reset(c)
	return up
}

// reset makes c the connection up reads and writes (TLS over the old one).
func (up *upstream) reset(c net.Conn) {
	up.conn, up.lim = c, &limitedReader{r: c, n: math.MaxInt64}
	up.br = bufio.NewReaderSize(up.lim, 16<<10)
}

// readResponse reads a response's headers from up, within
// maxResponseHeader.
func (up *upstream) readResponse(req *http.Request) (*http.Response, error) {
	up.lim.n = maxResponseHeader
	resp, err := http.ReadResponse(up.br, req)
	up.lim.n = math.MaxInt64
	if err != nil && up.lim.hit {
		return nil, fmt.Errorf("its response headers are over %d bytes", maxResponseHeader)
	}
	if err == nil {
		scrubHeaders(resp.Header, up.scrub)
	}
	return resp, err
}

// serveHTTP reads requests from the client until it closes or a request
// ends the connection; each is decided, logged and forwarded on its own.
func (f *flow) serveHTTP(lr *limitedReader, br *bufio.Reader, cw net.Conn, m httpMode) {
	p := f.p
	up := m.up
	defer func() {
		if up != nil {
			up.conn.Close()
			f.disconnected()
		}
	}()
	wait := p.cfg.HandshakeTimeout // for the first request; then the idle timeout
	for {
		cw.SetReadDeadline(time.Now().Add(wait))
		wait = p.cfg.IdleTimeout
		if _, err := br.Peek(1); err != nil {
			if note := f.killed(); note != "" && up != nil {
				// Idle, kept alive to a host the rules now deny.
				e := f.entry("http", up.t, time.Now())
				if m.sni != "" {
					e.Proto = "https"
				}
				e.Allowed, e.Rule, e.Addr, e.Note = true, up.rule, up.addr.String(), note
				p.emit(e)
			}
			return
		}
		cw.SetReadDeadline(time.Now().Add(p.cfg.HandshakeTimeout))
		lr.n = int64(p.cfg.MaxHeaderBytes)
		req, err := http.ReadRequest(br)
		lr.n = math.MaxInt64
		if err != nil {
			if lr.hit {
				io.WriteString(cw, refusal(http.StatusRequestHeaderFieldsTooLarge, "the request's headers are over "+strconv.Itoa(p.cfg.MaxHeaderBytes)+" bytes"))
			} else if !errors.Is(err, io.EOF) && !isTimeout(err) {
				io.WriteString(cw, refusal(http.StatusBadRequest, "the proxy could not read this request"))
			}
			return
		}
		cw.SetReadDeadline(time.Time{})
		if m.explicit && req.Method == http.MethodConnect {
			f.connect(req, lr, br, cw)
			return
		}
		var keep bool
		up, keep = f.forward(req, br, cw, m, up)
		if !keep {
			return
		}
	}
}

// forward decides on one request and sends it upstream (reusing up when
// it goes to the same target), and its response back. keep says whether
// the client connection carries on.
func (f *flow) forward(req *http.Request, br *bufio.Reader, cw net.Conn, m httpMode, up *upstream) (*upstream, bool) {
	p := f.p
	start := time.Now()
	proto := "http"
	if m.sni != "" {
		proto = "https"
	}
	t, msg := requestTarget(req, m)
	e := f.entry(proto, t, start)
	fail := func(code int, rule, text string) (*upstream, bool) {
		e.Rule = rule
		e.Duration = time.Since(start)
		p.emit(e)
		io.WriteString(cw, refusal(code, text))
		return up, false
	}
	if msg == "" && req.Method == http.MethodConnect {
		msg = "CONNECT is for the explicit proxy only"
	}
	if msg != "" {
		return fail(http.StatusBadRequest, "unreadable request", msg)
	}
	rules, secrets := f.st.view()
	if up == nil || up.t != t {
		if up != nil {
			up.conn.Close()
			f.disconnected()
			up = nil
		}
		d := p.decide(context.Background(), rules, t, netip.Addr{})
		if !d.Allow {
			return fail(http.StatusForbidden, d.Rule, "the sandbox's network rules do not allow "+t.String()+": "+d.Rule)
		}
		c, ap, err := p.dial(context.Background(), d, t.port)
		if err == nil && m.sni != "" {
			c, err = p.upstreamTLS(c, t.name)
		}
		if err != nil {
			e.Allowed, e.Addr, e.Note = true, addrOf(ap), "upstream unreachable"
			p.log.Info("egress proxy: upstream unreachable", "sandbox", f.st.id, "target", t.String(), "err", err)
			return fail(http.StatusBadGateway, d.Rule, "the proxy could not reach "+t.String()+": "+reason(err))
		}
		up = newUpstream(c, t, ap, d)
		if !f.connected(c, t, ap.Addr(), d.trusted) {
			return nil, false
		}
	} else {
		// The same target, kept alive: the rules may have changed.
		if !f.stillAllowed(p, rules) {
			return fail(http.StatusForbidden, rules.DecideName(t.name, t.port).Rule, "the sandbox's network rules no longer allow "+t.String())
		}
	}
	e.Allowed, e.Rule, e.Addr = true, up.rule, up.addr.String()
	e.Note, up.scrub = applySecrets(req, t.name, secrets)
	prepare(req)
	keep, out, in, err := f.exchange(req, br, cw, up)
	e.BytesOut, e.BytesIn, e.Duration = out, in, time.Since(start)
	if note := f.killed(); note != "" {
		e.Note = joinNote(e.Note, note)
	} else if err != nil {
		e.Note = joinNote(e.Note, err.Error())
	}
	p.emit(e)
	return up, keep
}

// requestTarget reads where req goes; a message says why it cannot.
func requestTarget(req *http.Request, m httpMode) (target, string) {
	if m.explicit {
		u := req.URL
		if u.Scheme != "http" || u.Host == "" {
			return target{}, "the proxy takes absolute http:// URLs; use CONNECT for https"
		}
		if u.User != nil {
			return target{}, "the URL carries credentials (user:password@): send them in an Authorization header"
		}
		t, err := parseTarget(u.Host, 80)
		if err != nil {
			return t, "the URL's host: " + err.Error()
		}
		return t, ""
	}
	if req.Host == "" {
		if m.fallback.name == "" && !m.fallback.addr.IsValid() {
			return target{}, "the request has no Host header"
		}
		return m.fallback, ""
	}
	t, err := parseTarget(req.Host, m.port)
	if err != nil {
		return t, "the Host header: " + err.Error()
	}
	t.port = m.port // the connection's port, whatever Host says
	if m.sni != "" && t.name != m.sni {
		return t, "the Host header (" + t.host() + ") is not the TLS server name (" + m.sni + ")"
	}
	return t, ""
}

// prepare makes req ready to be written upstream in origin form.
func prepare(req *http.Request) {
	for _, h := range []string{"Proxy-Connection", "Proxy-Authorization", "Keep-Alive"} {
		req.Header.Del(h)
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""} // Request.Write adds Go's otherwise
	}
	req.URL.Scheme, req.URL.Host, req.URL.User = "", "", nil
}

// exchange writes req upstream while reading the response (so a server
// that answers before the body, or a client waiting for 100 Continue,
// works), then relays the response. An upgrade becomes a tunnel.
func (f *flow) exchange(req *http.Request, br *bufio.Reader, cw net.Conn, up *upstream) (keep bool, out, in int64, err error) {
	upw := &counter{w: up.conn}
	wrote := make(chan error, 1)
	go func() { wrote <- req.Write(upw) }()
	clientW := &counter{w: cw}
	bw := bufio.NewWriterSize(clientW, 8<<10)
	var resp *http.Response
	for {
		resp, err = up.readResponse(req)
		if err != nil {
			up.conn.Close()
			werr := <-wrote
			if clientW.n == 0 {
				msg := "the upstream server sent no valid response"
				if up.lim.hit {
					msg = "the upstream server's response headers are over " + strconv.Itoa(maxResponseHeader) + " bytes"
				}
				io.WriteString(clientW, refusal(http.StatusBadGateway, msg))
			}
			if werr != nil && !errors.Is(werr, net.ErrClosed) {
				err = werr
			}
			return false, upw.n, clientW.n, fmt.Errorf("upstream response: %s", reason(err))
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		resp.Write(bw) // 1xx: relay and read on
		bw.Flush()
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Write(bw)
		bw.Flush()
		if werr := <-wrote; werr != nil {
			return false, upw.n, clientW.n, werr
		}
		o, i := pipe(&bufConn{Conn: cw, r: br}, cw, &bufConn{Conn: up.conn, r: up.br}, up.conn)
		return false, upw.n + o, clientW.n + i, nil
	}
	if n, ok, err := spliceBody(resp, up, cw, clientW); ok {
		// Not resp.Body.Close: it would wait for the bytes spliced past it.
		if werr := <-wrote; err == nil {
			err = werr
		}
		keep = err == nil && n == resp.ContentLength && !req.Close && !resp.Close
		if !keep {
			up.conn.Close()
		}
		return keep, upw.n, clientW.n, err
	}
	resp.Body = &flushingBody{ReadCloser: resp.Body, w: bw}
	err = resp.Write(writerOnly{bw}) // not bw.ReadFrom: the body's reads flush bw

	if err == nil {
		err = bw.Flush()
	}
	resp.Body.Close()
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case werr := <-wrote:
		if err == nil {
			err = werr
		}
	case <-t.C:
		// The response is done and the request's body still is not:
		// the connection cannot carry on.
		up.conn.Close()
		<-wrote
		return false, upw.n, clientW.n, err
	}
	keep = err == nil && !req.Close && !resp.Close
	if !keep {
		up.conn.Close()
	}
	return keep, upw.n, clientW.n, err
}

// flushingBody flushes what the writer holds before each read that may
// wait for the upstream, so streamed responses (server-sent events)
// reach the client as they come.
type flushingBody struct {
	io.ReadCloser
	w *bufio.Writer
}

func (b *flushingBody) Read(p []byte) (int, error) {
	if b.w.Buffered() > 0 {
		if err := b.w.Flush(); err != nil {
			return 0, err
		}
	}
	return b.ReadCloser.Read(p)
}

// spliceBody relays a response with a known length between two TCP
// connections by splice(2) (TCPConn.ReadFrom of a LimitedReader), which
// copies no byte through user space: the headers first, then what the
// reader holds, then the rest. ok is false for any other response, to
// relay the usual way.
func spliceBody(resp *http.Response, up *upstream, cw net.Conn, clientW *counter) (n int64, ok bool, err error) {
	dst, dok := cw.(*net.TCPConn)
	src, sok := up.conn.(*net.TCPConn)
	if !dok || !sok || resp.Body == http.NoBody || resp.ContentLength <= 0 || len(resp.TransferEncoding) > 0 || len(resp.Trailer) > 0 {
		return 0, false, nil
	}
	var hdr strings.Builder
	hdr.WriteString("HTTP/1.1 " + resp.Status + "\r\n")
	resp.Header.Write(&hdr)
	if resp.Header.Get("Content-Length") == "" {
		hdr.WriteString("Content-Length: " + strconv.FormatInt(resp.ContentLength, 10) + "\r\n")
	}
	hdr.WriteString("\r\n")
	if _, err := io.WriteString(clientW, hdr.String()); err != nil {
		return 0, true, err
	}
	held := min(int64(up.br.Buffered()), resp.ContentLength)
	n, err = io.CopyN(clientW, up.br, held)
	if err == nil && n < resp.ContentLength {
		var m int64
		m, err = dst.ReadFrom(io.LimitReader(src, resp.ContentLength-n))
		n += m
		clientW.n += m
	}
	if err == nil && n < resp.ContentLength {
		err = io.ErrUnexpectedEOF
	}
	return n, true, err
}

// writerOnly hides a writer's ReadFrom.
type writerOnly struct{ io.Writer }

// upstreamTLS makes a TLS client connection for name over c, verified
// with the configured roots.
func (p *Proxy) upstreamTLS(c net.Conn, name string) (net.Conn, error) {
	tc := tls.Client(c, &tls.Config{ServerName: name, RootCAs: p.cfg.UpstreamRoots, NextProtos: []string{"http/1.1"}})
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.HandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("TLS with %s: %w", name, err)
	}
	return tc, nil
}

// limitedReader bounds what ReadRequest reads (n bytes from now on) and
// remembers hitting the bound.
type limitedReader struct {
	r   io.Reader
	n   int64
	hit bool
}

func (l *limitedReader) Read(b []byte) (int, error) {
	if l.n <= 0 {
		l.hit = true
		return 0, io.EOF
	}
	if int64(len(b)) > l.n {
		b = b[:l.n]
	}
	n, err := l.r.Read(b)
	l.n -= int64(n)
	return n, err
}

// refusal is a whole HTTP response that says what happened.
func refusal(code int, msg string) string {
	body := "reins egress proxy: " + msg + "\n"
	return "HTTP/1.1 " + strconv.Itoa(code) + " " + http.StatusText(code) + "\r\n" +
		"Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// reason is an error as a user may see it: what failed, without the
// proxy's own addresses.
func reason(err error) string {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Op + ": " + oe.Err.Error()
	}
	if isTimeout(err) {
		return "timed out"
	}
	return err.Error()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	if b == "" {
		return a
	}
	return a + "; " + b
}
