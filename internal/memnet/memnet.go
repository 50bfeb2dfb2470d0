// Package memnet is a listener inside the process: Dial makes a
// connected pair of unix stream sockets (socketpair(2)) and hands one end
// to Accept. reins serve serves its own API on one, so that a front end
// in the same process (the E2B endpoint) calls the API through its
// handler, with every check it makes, without a port or a socket file
// anyone else could reach. The kernel buffers both ways, unlike
// net.Pipe's rendezvous, so a bulk transfer is not a lock step.
package memnet

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
)

// Listener is an in-process net.Listener.
type Listener struct {
	conns  chan net.Conn
	done   chan struct{}
	closed sync.Once
}

// Listen returns a new listener.
func Listen() *Listener {
	return &Listener{conns: make(chan net.Conn), done: make(chan struct{})}
}

var _ net.Listener = (*Listener)(nil)

// Accept waits for the next Dial.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and Dial; connections made stay open.
func (l *Listener) Close() error {
	l.closed.Do(func() { close(l.done) })
	return nil
}

// Addr is a name for logs.
func (l *Listener) Addr() net.Addr { return addr{} }

// Dial connects to the listener; it waits for an Accept until ctx ends.
// Its signature is http.Transport.DialContext's (network and address are
// ignored).
func (l *Listener) Dial(ctx context.Context, _, _ string) (net.Conn, error) {
	ours, theirs, err := pair()
	if err != nil {
		return nil, err
	}
	select {
	case l.conns <- theirs:
		return ours, nil
	case <-l.done:
		err = net.ErrClosed
	case <-ctx.Done():
		err = ctx.Err()
	}
	ours.Close()
	theirs.Close()
	return nil, err
}

// pair makes two connected stream sockets as net.Conns.
func pair() (net.Conn, net.Conn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, os.NewSyscallError("socketpair", err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "memnet")
		c, err := net.FileConn(f) // dups fd
		f.Close()
		if err != nil {
			if i == 1 {
				conns[0].Close()
			} else {
				syscall.Close(fds[1])
			}
			return nil, nil, errors.Join(errors.New("memnet: a socket pair did not become a connection"), err)
		}
		conns[i] = c
	}
	return conns[0], conns[1], nil
}

type addr struct{}

func (addr) Network() string { return "memnet" }
func (addr) String() string  { return "in-process" }
