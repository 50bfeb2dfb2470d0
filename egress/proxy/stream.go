package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// ServeTransparent serves connections the firewall redirected to l:
// Config.OriginalDst says where each was going, and its first bytes say
// how to decide (see the package comment). It returns nil once Close
// stops it.
func (p *Proxy) ServeTransparent(l net.Listener) error {
	if p.cfg.OriginalDst == nil {
		l.Close()
		return errors.New("egress proxy: the transparent listener needs Config.OriginalDst")
	}
	return p.serve(l, func(c net.Conn, st *sandboxState) {
		dst, err := p.cfg.OriginalDst(c)
		if err != nil {
			p.log.Warn("egress proxy: redirected connection without its destination", "sandbox", st.id, "err", err)
			c.Close()
			return
		}
		dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
		p.handle(c, st, func(f *flow, lr *limitedReader, br *bufio.Reader) {
			hint := target{addr: dst.Addr(), port: int(dst.Port())}
			prefer := dst.Addr()
			if name, ok := st.names.get(dst.Addr()); ok {
				// A synthetic address of the sandbox DNS: the name
				// decides, and the proxy dials what it resolves to.
				hint, prefer = target{name: name, port: int(dst.Port())}, netip.Addr{}
			}
			f.stream(lr, br, hint, prefer, nil)
		})
	})
}

// connect serves a CONNECT: the target is decided and dialed before the
// client is told 200, then the tunnel is read like a redirected
// connection whose name is the CONNECT host.
func (f *flow) connect(req *http.Request, lr *limitedReader, br *bufio.Reader, cw net.Conn) {
	p := f.p
	start := time.Now()
	t, err := parseTarget(req.RequestURI, 0)
	e := f.entry("tcp", t, start)
	refuse := func(code int, rule, msg string) {
		e.Rule, e.Duration = rule, time.Since(start)
		p.emit(e)
		io.WriteString(cw, refusal(code, msg))
	}
	if err != nil {
		refuse(http.StatusBadRequest, "unreadable CONNECT", "CONNECT wants HOST:PORT: "+err.Error())
		return
	}
	rules, _ := f.st.view()
	d := p.decide(context.Background(), rules, t, netip.Addr{})
	if !d.Allow {
		refuse(http.StatusForbidden, d.Rule, "the sandbox's network rules do not allow "+t.String()+": "+d.Rule)
		return
	}
	c, ap, err := p.dial(context.Background(), d, t.port)
	if err != nil {
		e.Addr, e.Note = addrOf(ap), "upstream unreachable"
		refuse(http.StatusBadGateway, d.Rule, "the proxy could not reach "+t.String()+": "+reason(err))
		return
	}
	if !f.connected(c, t, ap.Addr(), d.trusted) {
		return
	}
	if _, err := io.WriteString(cw, "HTTP/1.1 200 Connection Established\r\n\r\n"); err != nil {
		return
	}
	f.stream(lr, br, t, netip.Addr{}, newUpstream(c, t, ap, d))
}

// stream serves a connection by what its first bytes are: TLS (by SNI),
// HTTP (by each request's Host), else bytes to hint. prefer is the
// address a redirected connection was going to; up, if given, is the
// connection a CONNECT already made to hint.
func (f *flow) stream(lr *limitedReader, br *bufio.Reader, hint target, prefer netip.Addr, up *upstream) {
	p := f.p
	c := f.client
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(serverFirstWait))
	first, err := br.Peek(1)
	if isTimeout(err) {
		// Nothing yet: a protocol where the server speaks first, or a
		// client holding the connection open. Bytes, if hint may go.
		f.tunnel("tcp", br, hint, prefer, up, start, "")
		return
	}
	if err != nil {
		if up != nil {
			f.logTunnel("tcp", hint, up, start, 0, 0, "closed before sending")
		}
		return
	}
	c.SetReadDeadline(time.Now().Add(p.cfg.HandshakeTimeout))
	switch {
	case first[0] == 0x16: // a TLS handshake record
		f.serveTLS(br, hint, prefer, up, start)
	case looksHTTP(br):
		c.SetReadDeadline(time.Time{})
		f.serveHTTP(lr, br, c, httpMode{port: hint.port, fallback: hint, up: up})
	default:
		c.SetReadDeadline(time.Time{})
		f.tunnel("tcp", br, hint, prefer, up, start, "")
	}
}

// serveTLS reads the ClientHello's SNI and either terminates the TLS (a
// secret is bound to the name) or tunnels it blind.
func (f *flow) serveTLS(br *bufio.Reader, hint target, prefer netip.Addr, up *upstream, start time.Time) {
	sni := peekSNI(br)
	t := hint
	if sni != "" {
		st, err := parseTarget(sni, hint.port)
		if err != nil || st.name == "" {
			f.refuseTunnel("tls", hint, up, start, "unreadable TLS server name")
			return
		}
		st.port = hint.port
		if up != nil && st != up.t {
			f.refuseTunnel("tls", st, up, start, "the TLS server name "+st.name+" is not the CONNECT host "+up.t.host())
			return
		}
		t = st
	}
	f.client.SetReadDeadline(time.Time{})
	_, secrets := f.st.view()
	if t.name != "" && f.st.ca != nil && boundTo(secrets, t.name) {
		f.terminate(br, t, up, start)
		return
	}
	f.tunnel("tls", br, t, prefer, up, start, "")
}

// terminate serves TLS to the client with a leaf of the sandbox's CA
// for t's name, and the requests inside over TLS to the real host.
func (f *flow) terminate(br *bufio.Reader, t target, up *upstream, start time.Time) {
	p := f.p
	bc := &bufConn{Conn: f.client, r: br}
	tc := tls.Server(bc, &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return f.st.ca.leaf(t.name) },
		NextProtos:     []string{"http/1.1"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.HandshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		f.refuseTunnel("https", t, up, start, "TLS handshake with the sandbox failed")
		return
	}
	if up != nil {
		c, err := p.upstreamTLS(up.conn, t.name)
		if err != nil {
			e := f.entry("https", t, start)
			e.Allowed, e.Rule, e.Addr, e.Note = true, up.rule, up.addr.String(), "upstream TLS failed"
			e.Duration = time.Since(start)
			p.emit(e)
			return
		}
		up.reset(c)
		f.connected(c, up.t, up.addr.Addr(), up.trusted)
	}
	lr := &limitedReader{r: tc, n: 1 << 62}
	f.serveHTTP(lr, bufio.NewReaderSize(lr, 16<<10), tc, httpMode{port: t.port, sni: t.name, up: up})
}

// tunnel connects the client to t (or uses up) and copies bytes both ways.
func (f *flow) tunnel(proto string, br *bufio.Reader, t target, prefer netip.Addr, up *upstream, start time.Time, note string) {
	p := f.p
	f.client.SetReadDeadline(time.Time{})
	if up == nil {
		rules, _ := f.st.view()
		d := p.decide(context.Background(), rules, t, prefer)
		if !d.Allow {
			e := f.entry(proto, t, start)
			e.Rule, e.Duration = d.Rule, time.Since(start)
			p.emit(e)
			return
		}
		c, ap, err := p.dial(context.Background(), d, t.port)
		if err != nil {
			e := f.entry(proto, t, start)
			e.Allowed, e.Rule, e.Addr, e.Note, e.Duration = true, d.Rule, addrOf(ap), "upstream unreachable", time.Since(start)
			p.emit(e)
			return
		}
		if !f.connected(c, t, ap.Addr(), d.trusted) {
			return
		}
		up = &upstream{conn: c, t: t, addr: ap, trusted: d.trusted, rule: d.Rule}
	}
	out, in := pipe(&bufConn{Conn: f.client, r: br}, f.client, up.conn, up.conn)
	f.logTunnel(proto, t, up, start, out, in, note)
}

func (f *flow) logTunnel(proto string, t target, up *upstream, start time.Time, out, in int64, note string) {
	e := f.entry(proto, t, start)
	e.Allowed, e.Rule, e.Addr = true, up.rule, up.addr.String()
	e.BytesOut, e.BytesIn, e.Duration = out, in, time.Since(start)
	e.Note = joinNote(note, f.killed())
	f.p.emit(e)
}

// refuseTunnel logs a refused tunnel (closing a CONNECT's upstream).
func (f *flow) refuseTunnel(proto string, t target, up *upstream, start time.Time, rule string) {
	e := f.entry(proto, t, start)
	e.Rule, e.Duration = rule, time.Since(start)
	if up != nil {
		e.Addr = up.addr.String()
		up.conn.Close()
	}
	f.p.emit(e)
}

// looksHTTP reports whether the client's first bytes are an HTTP/1
// request line's method. It waits for more bytes only while what it has
// could still be one.
func looksHTTP(br *bufio.Reader) bool {
	methods := []string{"GET ", "POST ", "HEAD ", "PUT ", "DELETE ", "OPTIONS ", "PATCH ", "TRACE "}
	for n := max(br.Buffered(), 1); ; n++ {
		b, err := br.Peek(n)
		if err != nil {
			return false
		}
		more := false
		for _, m := range methods {
			if len(b) >= len(m) && string(b[:len(m)]) == m {
				return true
			}
			if len(b) < len(m) && string(b) == m[:len(b)] {
				more = true
			}
		}
		if !more {
			return false
		}
	}
}

// peekSNI reads the server name from the ClientHello at the head of br
// without consuming it; "" if there is none or it cannot be read.
func peekSNI(br *bufio.Reader) string {
	hdr, err := br.Peek(5)
	if err != nil || hdr[0] != 0x16 {
		return ""
	}
	n := int(hdr[3])<<8 | int(hdr[4])
	if n > 16384 {
		return ""
	}
	rec, err := br.Peek(5 + n)
	if err != nil {
		return ""
	}
	var sni string
	errDone := errors.New("done")
	srv := tls.Server(readOnlyConn{r: &sliceReader{b: rec}}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			sni = h.ServerName
			return nil, errDone
		},
	})
	srv.Handshake()
	return sni
}

// readOnlyConn feeds crypto/tls a recorded ClientHello; it writes nothing.
type readOnlyConn struct {
	net.Conn
	r io.Reader
}

func (c readOnlyConn) Read(b []byte) (int, error)         { return c.r.Read(b) }
func (c readOnlyConn) Write(b []byte) (int, error)        { return 0, io.ErrClosedPipe }
func (c readOnlyConn) Close() error                       { return nil }
func (c readOnlyConn) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (c readOnlyConn) RemoteAddr() net.Addr               { return &net.TCPAddr{} }
func (c readOnlyConn) SetDeadline(time.Time) error        { return nil }
func (c readOnlyConn) SetReadDeadline(time.Time) error    { return nil }
func (c readOnlyConn) SetWriteDeadline(t time.Time) error { return nil }

type sliceReader struct{ b []byte }

func (r *sliceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// boundTo reports whether any secret is bound to name.
func boundTo(secrets []Secret, name string) bool {
	for _, s := range secrets {
		if s.boundTo(name) {
			return true
		}
	}
	return false
}
