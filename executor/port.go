package executor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Ports into the sandbox. The service reaches a TCP port on the sandbox's
// own loopback through the executor's socket, so no host port is opened
// per sandbox and the sandbox's network mode does not matter:
//
//	GET /reins.port.v1/3000 HTTP/1.1
//	Authorization: Bearer <token>
//	Connection: Upgrade
//	Upgrade: reins-tcp
//
// is answered "101 Switching Protocols", after which the connection
// carries the TCP stream's bytes both ways, unframed (a frame header per
// chunk would be one more syscall per chunk, and gVisor makes syscalls
// expensive). Nothing listening is a 502 whose body says so; a bad port a
// 400; too many open at once a 503. Only HTTP/1.1 can be upgraded.
const (
	// PortPath is the prefix of a port connection's path; the port follows.
	PortPath = "/reins.port.v1/"
	// PortUpgrade is the Upgrade token of a port connection.
	PortUpgrade = "reins-tcp"
	// MaxPortConns is how many port connections an executor keeps open at
	// once; the service bounds them per sandbox below this.
	MaxPortConns = 1024
)

// portDialTimeout bounds the connect to the port inside the sandbox.
const portDialTimeout = 5 * time.Second

// ports is the set of open port connections, closed with the server.
type ports struct {
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	open   int // connections to ports (each is two conns)
	closed bool
}

// add counts c (the sandbox's side of a connection) against the bound;
// pair adds the caller's side, which Close must end too.
func (p *ports) add(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.open >= MaxPortConns {
		return false
	}
	if p.conns == nil {
		p.conns = map[net.Conn]struct{}{}
	}
	p.conns[c] = struct{}{}
	p.open++
	return true
}

func (p *ports) pair(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return
	}
	p.conns[c] = struct{}{}
}

func (p *ports) remove(up, down net.Conn) {
	p.mu.Lock()
	delete(p.conns, up)
	if down != nil {
		delete(p.conns, down)
	}
	p.open--
	p.mu.Unlock()
}

func (p *ports) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
}

// portError answers a port request that cannot be upgraded, in words.
func portError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	io.WriteString(w, msg+"\n")
}

// servePort connects the caller to a port on the sandbox's loopback.
func (s *Server) servePort(w http.ResponseWriter, r *http.Request) {
	port, err := ParsePort(strings.TrimPrefix(r.URL.Path, PortPath))
	if err != nil {
		portError(w, http.StatusBadRequest, err.Error())
		return
	}
	if r.ProtoMajor != 1 || !strings.EqualFold(r.Header.Get("Upgrade"), PortUpgrade) {
		portError(w, http.StatusBadRequest, "a port connection is an HTTP/1.1 request with \"Connection: Upgrade\" and \"Upgrade: "+PortUpgrade+"\"")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), portDialTimeout)
	defer cancel()
	up, err := dialLoopback(ctx, port)
	if err != nil {
		portError(w, http.StatusBadGateway, err.Error())
		return
	}
	if !s.ports.add(up) {
		up.Close()
		portError(w, http.StatusServiceUnavailable, fmt.Sprintf("too many port connections open in the sandbox (at most %d): close some and retry", MaxPortConns))
		return
	}
	defer up.Close()
	down, rw, ok := switchProtocols(w, PortUpgrade)
	if !ok {
		s.ports.remove(up, nil)
		return
	}
	s.ports.pair(down)
	defer s.ports.remove(up, down)
	defer down.Close()
	if err := rw.Flush(); err != nil {
		return
	}
	s.touch()
	splice(up, rawConn(down, rw.Reader))
	s.touch()
}

// switchProtocols answers "101 Switching Protocols" to proto and takes
// the connection over; false when it cannot (said in words when it still
// can be).
func switchProtocols(w http.ResponseWriter, proto string) (net.Conn, *bufio.ReadWriter, bool) {
	h, ok := w.(http.Hijacker)
	if !ok {
		portError(w, http.StatusInternalServerError, "this connection cannot be upgraded")
		return nil, nil, false
	}
	w.Header().Set("Connection", "Upgrade")
	w.Header().Set("Upgrade", proto)
	w.WriteHeader(http.StatusSwitchingProtocols)
	down, rw, err := h.Hijack()
	return down, rw, err == nil
}

// ParsePort parses a TCP port, 1–65535, in decimal without a sign or
// leading zeros.
func ParsePort(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != s {
		return 0, fmt.Errorf("%q is not a port: a port is a number from 1 to 65535", s)
	}
	return n, nil
}

// dialLoopback connects to port on 127.0.0.1, then on [::1].
func dialLoopback(ctx context.Context, port int) (net.Conn, error) {
	var d net.Dialer
	p := strconv.Itoa(port)
	c, err := d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", p))
	if err == nil {
		return c, nil
	}
	c, err6 := d.DialContext(ctx, "tcp6", net.JoinHostPort("::1", p))
	if err6 == nil {
		return c, nil
	}
	if errors.Is(err, syscall.ECONNREFUSED) && (errors.Is(err6, syscall.ECONNREFUSED) || errors.Is(err6, syscall.EADDRNOTAVAIL) || errors.Is(err6, syscall.ENETUNREACH) || errors.Is(err6, syscall.EAFNOSUPPORT)) {
		return nil, fmt.Errorf("nothing listens on port %d in the sandbox (start a server on 127.0.0.1:%d or [::1]:%d there)", port, port, port)
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("port %d in the sandbox did not accept a connection within %s", port, portDialTimeout)
	}
	return nil, fmt.Errorf("connecting to port %d in the sandbox: %v", port, err)
}

// rawConn is the hijacked connection itself when nothing waits in the
// buffers above it, so that copies can splice; a reader over the buffered
// bytes first otherwise.
func rawConn(c net.Conn, br *bufio.Reader) net.Conn {
	bc, ok := c.(*bufferedConn)
	if br.Buffered() == 0 && ok && bc.r.Buffered() == 0 {
		return bc.Conn
	}
	if br.Buffered() == 0 {
		return c
	}
	return &prefixConn{Conn: c, r: io.MultiReader(io.LimitReader(br, int64(br.Buffered())), c)}
}

type prefixConn struct {
	net.Conn
	r io.Reader
}

func (c *prefixConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// splice copies a and b into each other until both directions end, passing
// each end of stream on as a half close, then closes both.
func splice(a, b net.Conn) {
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		if _, err := io.Copy(dst, src); err != nil {
			// A broken stream, not an end: nothing more will pass.
			a.Close()
			b.Close()
		} else if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			dst.Close()
		}
		done <- struct{}{}
	}
	go pipe(a, b)
	go pipe(b, a)
	<-done
	<-done
	a.Close()
	b.Close()
}
