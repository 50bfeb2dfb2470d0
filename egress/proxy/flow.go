package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/reinsdev/reins/egress"
)

// flow is one client connection of a sandbox: what it is connected to
// now (so Update can close it), and its two ends (so kill can).
type flow struct {
	p      *Proxy
	st     *sandboxState
	client net.Conn

	mu      sync.Mutex
	up      net.Conn
	cur     target
	curAddr netip.Addr // the upstream address; invalid while unconnected
	trusted bool
	note    string // why it was killed
}

// errTooMany refuses a connection over the sandbox's cap.
var errTooMany = errors.New("too many open connections")

// open registers a client connection of st, within its cap.
func (p *Proxy) open(st *sandboxState, c net.Conn) (*flow, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.gone {
		return nil, fmt.Errorf("sandbox %s is gone: %w", st.id, ErrNoSandbox)
	}
	if len(st.flows) >= p.cfg.MaxConns {
		return nil, fmt.Errorf("sandbox %s has %d connections open, the limit: %w", st.id, len(st.flows), errTooMany)
	}
	f := &flow{p: p, st: st, client: c}
	st.flows[f] = struct{}{}
	return f, nil
}

// done unregisters f and closes both ends.
func (f *flow) done() {
	f.st.mu.Lock()
	delete(f.st.flows, f)
	f.st.mu.Unlock()
	f.client.Close()
	f.mu.Lock()
	if f.up != nil {
		f.up.Close()
	}
	f.mu.Unlock()
}

// connected records f's upstream, for Update; it fails if f was killed
// meanwhile.
func (f *flow) connected(up net.Conn, t target, addr netip.Addr, trusted bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.note != "" {
		up.Close()
		return false
	}
	f.up, f.cur, f.curAddr, f.trusted = up, t, addr, trusted
	return true
}

// disconnected forgets f's upstream (closed by the caller).
func (f *flow) disconnected() {
	f.mu.Lock()
	f.up, f.curAddr = nil, netip.Addr{}
	f.mu.Unlock()
}

// killed is the note of a kill, "" if f was not killed.
func (f *flow) killed() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.note
}

// kill closes f's ends; its goroutine logs the note.
func (f *flow) kill(note string) {
	f.mu.Lock()
	if f.note == "" {
		f.note = note
	}
	up := f.up
	f.mu.Unlock()
	f.client.Close()
	if up != nil {
		up.Close()
	}
}

// stillAllowed reports whether rules allow what f is connected to.
func (f *flow) stillAllowed(p *Proxy, rules egress.Rules) bool {
	f.mu.Lock()
	t, a, trusted := f.cur, f.curAddr, f.trusted
	f.mu.Unlock()
	if !a.IsValid() {
		return true
	}
	if t.name != "" && !rules.DecideName(t.name, t.port).Allow {
		return false
	}
	return rules.DecideAddr(a, t.name != "", trusted).Allow
}

// entry starts a log entry for f.
func (f *flow) entry(proto string, t target, start time.Time) egress.Entry {
	return egress.Entry{Time: start, Sandbox: f.st.id, Proto: proto, Host: t.name, Port: t.port}
}

// addrOf is what an entry says it connected to.
func addrOf(a netip.AddrPort) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// bufConn is a connection whose reads come through a bufio.Reader that
// may hold bytes already peeked.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// CloseWrite half-closes, when the connection below can.
func (c *bufConn) CloseWrite() error { return closeWrite(c.Conn) }

func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// counter counts the bytes written through it.
type counter struct {
	w io.Writer
	n int64
}

func (c *counter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// pipe copies both ways until both directions end (half-closing each on
// EOF) or one fails; it returns the bytes each way.
func pipe(client io.ReadWriter, clientConn net.Conn, up io.ReadWriter, upConn net.Conn) (out, in int64) {
	done := make(chan int64, 1)
	go func() { done <- half(up, client, upConn, clientConn) }()
	in = half(client, up, clientConn, upConn)
	return <-done, in
}

// half copies src to dst, then half-closes dst (or, on an error, closes
// both).
func half(dst io.Writer, src io.Reader, dstConn, srcConn net.Conn) int64 {
	n, err := io.Copy(dst, src)
	if err != nil {
		dstConn.Close()
		srcConn.Close()
	} else {
		closeWrite(dstConn)
	}
	return n
}
