package executor

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The model gateway's way in. A program in the sandbox dials GatewayAddr
// on the sandbox's own loopback; the executor accepts the connection and
// hands it to the service over the executor's socket, which the service
// already reaches, so the gateway needs no network (it works under
// `--network none`). The handover is a port connection (PortPath) turned
// around: the service asks for the next connection,
//
//	POST /reins.gateway.v1/accept HTTP/1.1
//	Authorization: Bearer <token>
//	Connection: Upgrade
//	Upgrade: reins-gateway
//
// and the executor holds the request until a program connects, then
// answers "101 Switching Protocols"; the service answers that with one
// byte, GatewayAck, and from then on the connection carries the program's
// bytes both ways, unframed. The ack is what makes a handover sure: a
// service that died while its accept waited may not be noticed before the
// 101 is written (the write succeeds into the dead socket), and without the
// ack the program's connection would go to nobody; the executor gives a
// connection whose ack does not come to the next accept. The service keeps a few accepts waiting. While none
// waits (the service is restarting) connections queue here, at most
// MaxGatewayQueue of them, then in the kernel's backlog: nothing accepted
// is dropped, and the program's connect only waits.
//
// The executor listens when started with the gateway on (Config.Gateway,
// before any process of the sandbox runs, so none can take the port), or
// when told to on a running sandbox (POST GatewayListenPath), which fails
// with 409 and "port 47070 is in use in the sandbox" when something else
// took it.
const (
	// GatewayAddr is where programs in the sandbox reach the gateway; the
	// same as gateway.Addr (a test holds them equal: the executor does not
	// import the brain's packages).
	GatewayAddr = "127.0.0.1:47070"
	// GatewayAcceptPath is the path of a request for the next connection.
	GatewayAcceptPath = "/reins.gateway.v1/accept"
	// GatewayListenPath turns the gateway's listener on (idempotent).
	GatewayListenPath = "/reins.gateway.v1/listen"
	// GatewayUpgrade is the Upgrade token of a handed-over connection.
	GatewayUpgrade = "reins-gateway"
	// GatewayAck is the byte the service sends on receiving the 101.
	GatewayAck = 'A'
	// MaxGatewayQueue is how many accepted connections wait for the
	// service at most; beyond, the executor stops accepting and the
	// kernel's backlog holds the rest.
	MaxGatewayQueue = 256

	gatewayPrefix = "/reins.gateway.v1/"
)

// GatewayStats counts what the gateway's listener did.
type GatewayStats struct {
	Listening bool
	Queued    int    // connections waiting for the service now
	Waiting   int    // the service's accepts waiting for a connection now
	Accepted  uint64 // connections accepted on the loopback
	Handed    uint64 // connections handed to the service
	// QueueFull counts the times the queue was full, so the executor
	// stopped accepting until the service took one.
	QueueFull uint64
	// Lost counts accepted connections closed unserved: only when the
	// executor closes, or a handover failed with the queue full.
	Lost uint64
}

// gatewayListener is the gateway's loopback listener and its queue.
type gatewayListener struct {
	mu     sync.Mutex
	ln     net.Listener
	queue  chan net.Conn
	done   chan struct{} // closed by close
	closed bool
	wg     sync.WaitGroup

	accepted, handed, full, lost atomic.Uint64
	waiting                      atomic.Int64
}

// errPortInUse is a gateway port some process of the sandbox took first.
var errPortInUse = errors.New("port in use")

// listen starts listening on addr (started); it does nothing when
// listening already.
func (g *gatewayListener) listen(addr string) (started bool, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false, net.ErrClosed
	}
	if g.ln != nil {
		return false, nil
	}
	ln, err := net.Listen("tcp4", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return false, errPortInUse
	}
	if err != nil {
		return false, err
	}
	g.ln = ln
	g.queue = make(chan net.Conn, MaxGatewayQueue)
	g.done = make(chan struct{})
	g.wg.Go(g.acceptLoop)
	return true, nil
}

func (g *gatewayListener) acceptLoop() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				continue // out of descriptors for now: the backlog waits
			}
			return
		}
		g.accepted.Add(1)
		select {
		case g.queue <- c:
			continue
		default:
		}
		g.full.Add(1)
		select {
		case g.queue <- c:
		case <-g.done:
			c.Close()
			g.lost.Add(1)
			return
		}
	}
}

// conns is the queue, nil when not listening; done ends with the listener.
func (g *gatewayListener) conns() (<-chan net.Conn, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ln == nil || g.closed {
		return nil, nil
	}
	return g.queue, g.done
}

// requeue puts back a connection whose handover failed; once the
// listener is closed (its queue emptied) it closes it instead.
func (g *gatewayListener) requeue(c net.Conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		select {
		case g.queue <- c:
			return
		default:
		}
	}
	c.Close()
	g.lost.Add(1)
}

func (g *gatewayListener) stats() GatewayStats {
	g.mu.Lock()
	st := GatewayStats{Listening: g.ln != nil && !g.closed}
	if g.queue != nil {
		st.Queued = len(g.queue)
	}
	g.mu.Unlock()
	st.Waiting = int(g.waiting.Load())
	st.Accepted, st.Handed, st.QueueFull, st.Lost = g.accepted.Load(), g.handed.Load(), g.full.Load(), g.lost.Load()
	return st
}

// close stops listening and closes the connections still queued.
func (g *gatewayListener) close() {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	g.closed = true
	ln := g.ln
	g.mu.Unlock()
	if ln == nil {
		return
	}
	ln.Close()
	close(g.done)
	g.wg.Wait()
	for {
		select {
		case c := <-g.queue:
			c.Close()
			g.lost.Add(1)
		default:
			return
		}
	}
}

// ListenGateway starts the gateway's listener on Config.GatewayAddr (it
// does nothing when it listens already). A port some process of the
// sandbox took first is an error that says so.
func (s *Server) ListenGateway() error {
	addr := s.cfg.GatewayAddr
	if addr == "" {
		addr = GatewayAddr
	}
	started, err := s.gateway.listen(addr)
	if errors.Is(err, errPortInUse) {
		_, port, _ := net.SplitHostPort(addr)
		return fmt.Errorf("port %s is in use in the sandbox: the model gateway listens there; stop what listens on %s in the sandbox, or make a new sandbox with the gateway on from the start", port, addr)
	}
	if err != nil {
		return fmt.Errorf("the model gateway cannot listen on %s in the sandbox: %v", addr, err)
	}
	if started {
		s.log.Info("model gateway listening", "addr", addr)
	}
	return nil
}

// GatewayStats counts what the gateway's listener did.
func (s *Server) GatewayStats() GatewayStats { return s.gateway.stats() }

// serveGateway answers the gateway's requests (path under gatewayPrefix).
func (s *Server) serveGateway(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		portError(w, http.StatusMethodNotAllowed, "gateway requests are POSTs")
		return
	}
	switch r.URL.Path {
	case GatewayListenPath:
		if err := s.ListenGateway(); err != nil {
			portError(w, http.StatusConflict, err.Error())
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case GatewayAcceptPath:
		s.acceptGateway(w, r)
	default:
		portError(w, http.StatusNotFound, "no such gateway request: "+truncPath(r.URL.Path))
	}
}

// gatewayAckTimeout bounds the wait for the service's ack of a handover.
const gatewayAckTimeout = 5 * time.Second

// ackHandover sends the 101 and reads the service's ack.
func ackHandover(down net.Conn, rw *bufio.ReadWriter) bool {
	if err := rw.Flush(); err != nil {
		return false
	}
	down.SetReadDeadline(time.Now().Add(gatewayAckTimeout))
	b, err := rw.ReadByte()
	down.SetReadDeadline(time.Time{})
	return err == nil && b == GatewayAck
}

func truncPath(p string) string {
	if len(p) > 80 {
		return p[:80] + "…"
	}
	return p
}

// acceptGateway holds the request until a program connects to the
// gateway, then hands the connection over.
func (s *Server) acceptGateway(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor != 1 || !strings.EqualFold(r.Header.Get("Upgrade"), GatewayUpgrade) {
		portError(w, http.StatusBadRequest, "a gateway accept is an HTTP/1.1 request with \"Connection: Upgrade\" and \"Upgrade: "+GatewayUpgrade+"\"")
		return
	}
	queue, done := s.gateway.conns()
	if queue == nil {
		portError(w, http.StatusConflict, "the model gateway is not on in this sandbox")
		return
	}
	var up net.Conn
	s.gateway.waiting.Add(1)
	defer s.gateway.waiting.Add(-1)
	select {
	case up = <-queue:
	case <-done:
		portError(w, http.StatusServiceUnavailable, "the executor is closing")
		return
	case <-r.Context().Done():
		return // the service went away: the next one asks again
	}
	if !s.ports.add(up) {
		s.gateway.requeue(up)
		portError(w, http.StatusServiceUnavailable, fmt.Sprintf("too many connections open through the executor (at most %d): close some and retry", MaxPortConns))
		return
	}
	down, rw, ok := switchProtocols(w, GatewayUpgrade)
	if !ok {
		s.ports.remove(up, nil)
		s.gateway.requeue(up)
		return
	}
	s.ports.pair(down)
	if !ackHandover(down, rw) {
		// Nothing of the program's was read yet: the next accept gets it,
		// once this one no longer counts it as its own.
		down.Close()
		s.ports.remove(up, down)
		s.gateway.requeue(up)
		return
	}
	defer s.ports.remove(up, down)
	defer down.Close()
	defer up.Close()
	s.gateway.handed.Add(1)
	s.touch()
	splice(up, rawConn(down, rw.Reader))
	s.touch()
}
