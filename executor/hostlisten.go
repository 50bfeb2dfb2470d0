package executor

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"
)

// A gVisor checkpoint cannot save a socket that is backed by a host file
// descriptor, and the executor's listener on its socket in the host's
// control directory is one, as is every connection it accepted (runsc
// refuses: "Cannot save endpoint with bound host socket"). So before a
// checkpoint the service asks the executor to let go of them all
// (CheckpointReleasePath); the executor then serves nothing until it is
// told to listen again: by ListenAgainSignal (which the backend sends
// after a restore, or after a checkpoint that failed and left the sandbox
// running), or on its own after RelistenAfter, so that a service that
// died between the two never leaves a sandbox unreachable. While the
// sandbox is frozen for the checkpoint no timer runs, so the fallback
// cannot fire between the release and the save.

// ListenAgainSignal tells the executor (its init) to listen on its host
// socket again after a release. Anything in the sandbox may send it too:
// listening again is all it does, and a sandbox that makes its own
// checkpoint fail hurts only itself.
const ListenAgainSignal = syscall.SIGUSR2

// RelistenAfter is how long a released listener stays closed when no
// signal comes.
const RelistenAfter = 10 * time.Second

// relistenAfter is RelistenAfter; tests shorten it.
var relistenAfter = RelistenAfter

// HostListener is the executor's listener on its host socket, which can
// let go of the socket and every connection it accepted (Release) and
// listen on the same path again later (Relisten), while one Serve goes on
// across both: Accept waits while it is released.
type HostListener struct {
	path string

	mu     sync.Mutex
	l      net.Listener // nil while released
	wake   chan struct{}
	conns  map[*hostConn]struct{}
	closed bool
	timer  *time.Timer
	// releases counts Release calls, for tests and the log.
	releases int
}

// ListenHost listens on the unix socket path (see Listen).
func ListenHost(path string) (*HostListener, error) {
	l, err := Listen(path)
	if err != nil {
		return nil, err
	}
	return &HostListener{path: path, l: l, wake: make(chan struct{}), conns: map[*hostConn]struct{}{}}, nil
}

// Accept waits for a connection; while the listener is released it waits
// for Relisten.
func (h *HostListener) Accept() (net.Conn, error) {
	for {
		h.mu.Lock()
		l, wake, closed := h.l, h.wake, h.closed
		h.mu.Unlock()
		if closed {
			return nil, net.ErrClosed
		}
		if l == nil {
			<-wake
			continue
		}
		c, err := l.Accept()
		h.mu.Lock()
		if h.l != l || h.closed {
			// Released (or closed) while waiting: the error, or the
			// connection that slipped in, belongs to the old socket.
			h.mu.Unlock()
			if c != nil {
				c.Close()
			}
			continue
		}
		if err != nil {
			h.mu.Unlock()
			return nil, err
		}
		uc, ok := c.(*net.UnixConn)
		if !ok {
			h.mu.Unlock()
			c.Close()
			return nil, fmt.Errorf("executor: accepted a %T, not a unix connection", c)
		}
		hc := &hostConn{UnixConn: uc, h: h}
		h.conns[hc] = struct{}{}
		h.mu.Unlock()
		return hc, nil
	}
}

// Release closes the socket and every connection accepted on it but keep
// (which the caller closes once it has answered on it). It reports whether
// there was a socket to close.
func (h *HostListener) Release(keep net.Conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.l == nil || h.closed {
		return false
	}
	h.l.Close()
	h.l = nil
	h.releases++
	for c := range h.conns {
		if net.Conn(c) != keep {
			c.UnixConn.Close()
			delete(h.conns, c)
		}
	}
	h.timer = time.AfterFunc(relistenAfter, func() { h.Relisten() })
	return true
}

// Relisten listens on the socket again after a Release; it does nothing
// when the listener is not released.
func (h *HostListener) Relisten() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.l != nil || h.closed {
		return nil
	}
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	l, err := Listen(h.path)
	if err != nil {
		h.timer = time.AfterFunc(time.Second, func() { h.Relisten() })
		return fmt.Errorf("listening on %s again: %w", h.path, err)
	}
	h.l = l
	close(h.wake)
	h.wake = make(chan struct{})
	return nil
}

// Close closes the socket and ends Accept; connections stay to their
// server.
func (h *HostListener) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	if h.timer != nil {
		h.timer.Stop()
	}
	close(h.wake)
	if h.l != nil {
		return h.l.Close()
	}
	return nil
}

// Addr is the socket's address.
func (h *HostListener) Addr() net.Addr { return &net.UnixAddr{Name: h.path, Net: "unix"} }

func (h *HostListener) forget(c *hostConn) {
	h.mu.Lock()
	delete(h.conns, c)
	h.mu.Unlock()
}

// hostConn is a connection accepted on a HostListener. It embeds the
// *net.UnixConn so that copies still splice and half-close.
type hostConn struct {
	*net.UnixConn
	h *HostListener
}

func (c *hostConn) Close() error {
	c.h.forget(c)
	return c.UnixConn.Close()
}

// errNoHostListener is answered to a release asked of an executor that
// serves on another kind of listener (tests).
var errNoHostListener = errors.New("this executor does not serve on a host socket it can let go of")
