package client

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor"
)

// StartGateway turns the model gateway's listener on in the sandbox
// (executor.GatewayListenPath); it does nothing when it is on already. A
// port some process of the sandbox took first is
// errdefs.ErrFailedPrecondition with "port 47070 is in use in the sandbox".
func (c *Client) StartGateway(ctx context.Context) error {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://executor"+executor.GatewayListenPath, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.tr.RoundTrip(req)
	if err != nil {
		if cause := context.Cause(ctx); ctx.Err() != nil && errdefs.Kind(cause) != nil {
			return cause
		}
		return errdefs.WithMessage(errdefs.ErrUnavailable, "the sandbox's executor cannot be reached")
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	msg := strings.TrimSpace(string(body))
	switch resp.StatusCode {
	case http.StatusConflict:
		return errdefs.WithMessage(errdefs.ErrFailedPrecondition, msg)
	case http.StatusNotFound:
		return errdefs.WithMessage(errdefs.ErrUnimplemented, "the sandbox's executor is too old for the model gateway: recreate the sandbox")
	case http.StatusUnauthorized:
		return errdefs.WithMessage(errdefs.ErrUnauthenticated, "the sandbox's executor refused its token")
	}
	return errdefs.WithMessage(errdefs.ErrUnavailable, "the sandbox's executor refused to start the gateway: "+resp.Status)
}

// AcceptGateway waits for the next connection a program in the sandbox
// opens to the model gateway (executor.GatewayAcceptPath) and returns it,
// carrying that program's bytes. It waits until one comes or ctx ends.
func (c *Client) AcceptGateway(ctx context.Context) (net.Conn, error) {
	conn, err := c.dialUpgrade(ctx, http.MethodPost, executor.GatewayAcceptPath, executor.GatewayUpgrade, "gateway")
	if err != nil {
		return nil, err
	}
	// The ack: from here the connection is ours (see executor.GatewayAck).
	if _, err := conn.Write([]byte{executor.GatewayAck}); err != nil {
		conn.Close()
		return nil, errdefs.WithMessage(errdefs.ErrUnavailable, "the sandbox's executor closed the gateway connection")
	}
	return conn, nil
}

// GatewayListener is a net.Listener of the connections programs in one
// sandbox open to the model gateway: it keeps accepts waiting in the
// executor (Client.AcceptGateway) and bounds how many connections are open
// at once. Serve an http.Server on it.
type GatewayListener struct {
	c      *Client
	ctx    context.Context
	cancel context.CancelFunc
	conns  chan net.Conn
	slots  chan struct{} // one per open connection or waiting accept
	wg     sync.WaitGroup
	// errorf reports a failed accept (the next is tried after a pause).
	errorf func(err error)
}

var _ net.Listener = (*GatewayListener)(nil)

// GatewayListener returns a listener keeping waiting accepts in the
// executor, and at most maxOpen connections (those accepts included) open;
// onError, which may be nil, hears of failed accepts. Close it before the
// Client.
func (c *Client) GatewayListener(waiting, maxOpen int, onError func(error)) *GatewayListener {
	waiting = max(1, min(waiting, maxOpen))
	l := &GatewayListener{c: c, conns: make(chan net.Conn), slots: make(chan struct{}, max(maxOpen, 1)), errorf: onError}
	if l.errorf == nil {
		l.errorf = func(error) {}
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	for range waiting {
		l.wg.Go(l.acceptLoop)
	}
	return l
}

// Pauses between failed accepts (the sandbox is stopping, or its executor
// is busy): growing, so a dead sandbox costs little until it is released.
const (
	acceptPause    = 50 * time.Millisecond
	acceptPauseMax = 2 * time.Second
)

func (l *GatewayListener) acceptLoop() {
	pause := acceptPause
	for {
		select {
		case l.slots <- struct{}{}:
		case <-l.ctx.Done():
			return
		}
		conn, err := l.c.AcceptGateway(l.ctx)
		if err != nil {
			<-l.slots
			if l.ctx.Err() != nil {
				return
			}
			l.errorf(err)
			select {
			case <-time.After(pause):
			case <-l.ctx.Done():
				return
			}
			pause = min(2*pause, acceptPauseMax)
			continue
		}
		pause = acceptPause
		gc := &gatewayConn{Conn: conn, release: func() { <-l.slots }}
		select {
		case l.conns <- gc:
		case <-l.ctx.Done():
			gc.Close()
			return
		}
	}
}

// Accept returns the next connection; after Close, net.ErrClosed.
func (l *GatewayListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.ctx.Done():
		return nil, net.ErrClosed
	}
}

// Close ends the waiting accepts. Connections already accepted stay open
// until their own Close.
func (l *GatewayListener) Close() error {
	l.cancel()
	l.wg.Wait()
	return nil
}

// Addr names the sandbox's side.
func (l *GatewayListener) Addr() net.Addr { return gatewayAddr{} }

type gatewayAddr struct{}

func (gatewayAddr) Network() string { return "reins-gateway" }
func (gatewayAddr) String() string  { return executor.GatewayAddr }

// gatewayConn gives back its slot when closed.
type gatewayConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *gatewayConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
