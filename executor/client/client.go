// Package client talks to a reins-executor over its unix socket.
//
// One Client holds one HTTP/2 (cleartext) connection, reused by every call
// and multiplexing concurrent ones. No call hangs on an executor that does
// not answer: unary calls get a deadline (CallTimeout, unless the context
// has one), streams must start (and Upload and Download keep moving) within
// it, and HTTP/2 pings detect a connection whose other end is gone. Errors
// come back with errdefs kinds.
package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/api/reins/executor/v1/executorv1connect"
	"github.com/reinsdev/reins/errdefs"
)

// DefaultCallTimeout is how long an executor has to answer a call.
const DefaultCallTimeout = 30 * time.Second

// socketBuffer is the send buffer asked for on connections to the executor.
const socketBuffer = 1 << 20

// Option configures a Client.
type Option func(*Client)

// WithCallTimeout sets how long the executor has to answer: the deadline of
// unary calls (when the context has none), the time a stream has to start,
// and the most an Upload or Download may stall.
func WithCallTimeout(d time.Duration) Option {
	return func(c *Client) { c.timeout = d }
}

// Client is a connection to one executor. It is safe for concurrent use.
type Client struct {
	socket  string
	dir     *os.File // the socket's directory, held open: every dial starts from it
	name    string   // the socket's name in dir
	token   string
	timeout time.Duration
	// hostRoot is where the host sees the sandbox's root filesystem
	// (WithHostRoot), for staged transfers; "" without.
	hostRoot string
	tr       *http.Transport // HTTP/2: every call but the bulk transfers
	bulkTr   *http.Transport // HTTP/1.1: Upload and Download
	rpc      executorv1connect.ExecutorClient
	bulk     executorv1connect.ExecutorClient

	// staged are the files on the host's view of the sandbox's root that
	// staged transfers hold open; Close closes them, so that none keeps
	// the sandbox's filesystem (and its disk) alive after it (a caller
	// that stalls a download, say). closed: Close was called.
	stagedMu sync.Mutex
	staged   map[*os.File]struct{}
	closed   bool
}

// Dial returns a client for the executor listening on socketPath. It does
// not connect: the first call does (see WaitReady).
//
// The socket's directory must be one the caller trusts (it is opened once,
// not following a symlink); the socket itself may sit where the sandbox
// writes. Every connection opens the socket's name beneath that directory
// with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_XDEV), checks
// that it is a socket, and connects through the descriptor, so a name the
// sandbox replaced with a symlink (to a host socket, say) is refused, never
// followed. Any path length works.
func Dial(ctx context.Context, socketPath, token string, opts ...Option) (*Client, error) {
	if token == "" {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "client: the executor token is empty")
	}
	c := &Client{socket: socketPath, name: filepath.Base(socketPath), token: token, timeout: DefaultCallTimeout}
	for _, o := range opts {
		o(c)
	}
	fd, err := unix.Open(filepath.Dir(socketPath), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, errdefs.WithMessage(errdefs.ErrNotFound, fmt.Sprintf(
			"the directory of the executor socket %s cannot be opened: %v", socketPath, err))
	}
	c.dir = os.NewFile(uintptr(fd), filepath.Dir(socketPath))
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	c.tr = &http.Transport{
		// A frozen executor fails a call instead of hanging it (streams
		// answer with headers at once; uploads after their body). The
		// client's own calls hit their deadline first and say so; this
		// bounds calls others send through Transport (the API proxy).
		ResponseHeaderTimeout: c.timeout + time.Second,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			conn, err := c.dial(ctx)
			if uc, ok := conn.(*net.UnixConn); ok {
				// A deeper socket buffer: fewer, larger writes and reads
				// (capped by net.core.wmem_max).
				uc.SetWriteBuffer(socketBuffer)
			}
			return conn, err
		},
		Protocols: &protocols,
		HTTP2: &http.HTTP2Config{
			MaxReceiveBufferPerConnection: 8 << 20,
			MaxReceiveBufferPerStream:     4 << 20,
			MaxReadFrameSize:              1 << 20,
			SendPingTimeout:               15 * time.Second,
			PingTimeout:                   15 * time.Second,
		},
	}
	// Bulk transfers (Upload, Download) go over HTTP/1.1 connections of
	// their own: over HTTP/2 the receiver answers every few KiB it reads
	// with WINDOW_UPDATE frames and reads each frame's header and payload
	// apart, several syscalls per chunk; HTTP/1.1 just streams the bytes,
	// and under gVisor syscalls are what costs (measured on the host: about
	// twice the download throughput). Other calls stay on the one
	// multiplexed HTTP/2 connection.
	var bulkProtocols http.Protocols
	bulkProtocols.SetHTTP1(true)
	c.bulkTr = &http.Transport{
		ResponseHeaderTimeout: c.timeout + time.Second,
		DialContext:           c.tr.DialContext,
		Protocols:             &bulkProtocols,
		MaxIdleConnsPerHost:   4,
		WriteBufferSize:       256 << 10,
		ReadBufferSize:        256 << 10,
		DisableCompression:    true,
	}
	copts := []connect.ClientOption{
		connect.WithInterceptors(interceptor{c}),
		connect.WithAcceptCompression("gzip", nil, nil), // local socket: no compression
		connect.WithReadMaxBytes(64 << 20),
	}
	c.rpc = executorv1connect.NewExecutorClient(&http.Client{Transport: c.tr}, "http://executor", copts...)
	c.bulk = executorv1connect.NewExecutorClient(&http.Client{Transport: bigChunks{c.bulkTr}}, "http://executor", copts...)
	return c, nil
}

// ErrNotSocket is returned by a dial whose socket name is not a socket
// beneath its directory (a symlink, a regular file, a mount).
var ErrNotSocket = errors.New("not a socket")

// dial connects to the socket named c.name in c.dir without following a
// symlink or leaving the directory (see Dial).
func (c *Client) dial(ctx context.Context) (net.Conn, error) {
	fd, err := c.openSocket()
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: err}
	}
	defer unix.Close(fd)
	// connect(2) on the descriptor's magic link reaches the very inode
	// opened above, whatever the name points to by now.
	var d net.Dialer
	return d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", fd))
}

// openSocket opens c.name beneath c.dir as an O_PATH descriptor, refusing
// symlinks, other mounts and anything that is not a socket (ErrNotSocket).
func (c *Client) openSocket() (int, error) {
	fd, err := unix.Openat2(int(c.dir.Fd()), c.name, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
		return -1, ErrNotSocket
	}
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		unix.Close(fd)
		return -1, ErrNotSocket
	}
	return fd, nil
}

// Token is the executor's token, for a proxy that forwards calls as they
// are.
func (c *Client) Token() string { return c.token }

// Transport is the HTTP transport for a call to procedure (a path such as
// executorv1connect.ExecutorUploadProcedure): bulk transfers go over
// HTTP/1.1, everything else over the shared HTTP/2 connection.
func (c *Client) Transport(procedure string) http.RoundTripper {
	switch procedure {
	case executorv1connect.ExecutorUploadProcedure, executorv1connect.ExecutorDownloadProcedure:
		return c.bulkTr
	}
	return c.tr
}

// RPC is the generated client, for calls the helpers do not cover. Its calls
// carry the token and the deadlines too.
func (c *Client) RPC() executorv1connect.ExecutorClient { return c.rpc }

// Socket is the path of the executor's socket.
func (c *Client) Socket() string { return c.socket }

// Close closes the connection.
func (c *Client) Close() error {
	c.stagedMu.Lock()
	c.closed = true
	for f := range c.staged {
		f.Close()
	}
	c.staged = nil
	c.stagedMu.Unlock()
	c.tr.CloseIdleConnections()
	c.bulkTr.CloseIdleConnections()
	return c.dir.Close()
}

// callContext is ctx with the call deadline (CallTimeout) when it has
// none.
func (c *Client) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || c.timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, c.timeout, c.noAnswer())
}

// interceptor adds the token to every call and deadlines to unary ones.
type interceptor struct{ c *Client }

func (i interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	c := i.c
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+c.token)
		ctx, cancel := c.callContext(ctx)
		defer cancel()
		resp, err := next(ctx, req)
		return resp, c.wrap(ctx, err)
	}
}

func (i interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+i.c.token)
		return conn
	}
}

func (i interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// noAnswer is the cause given to calls cancelled because the executor did
// not answer in time.
func (c *Client) noAnswer() error {
	return errdefs.WithMessage(errdefs.ErrTimeout, fmt.Sprintf(
		"the sandbox's executor did not answer within %s (is the sandbox running, or paused?)", c.timeout))
}

// wrap turns err into an error with an errdefs kind; when ctx was cancelled
// with a cause, the cause tells the story.
func (c *Client) wrap(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil && errdefs.Kind(cause) != nil {
		return cause
	}
	err = errdefs.FromConnect(err)
	if errors.Is(err, errdefs.ErrUnavailable) {
		return errdefs.WithMessage(errdefs.ErrUnavailable, fmt.Sprintf("the sandbox's executor: %v", err))
	}
	return err
}

// watchdog cancels a stream's context when the executor makes no progress
// for the client's timeout; kick it on progress.
type watchdog struct {
	t *time.Timer
	d time.Duration
}

func (c *Client) watch(ctx context.Context) (context.Context, *watchdog, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	w := &watchdog{d: c.timeout}
	if c.timeout > 0 {
		cause := c.noAnswer()
		w.t = time.AfterFunc(c.timeout, func() { cancel(cause) })
	}
	return ctx, w, func() {
		w.stop()
		cancel(context.Canceled)
	}
}

func (w *watchdog) kick() {
	if w.t != nil {
		w.t.Reset(w.d)
	}
}

func (w *watchdog) stop() {
	if w.t != nil {
		w.t.Stop()
	}
}

// WaitReady polls the executor every millisecond or two until it answers
// Health, or ctx ends. It sits on the sandbox creation path.
func (c *Client) WaitReady(ctx context.Context) error {
	delay := time.Millisecond
	start := time.Now()
	for {
		attempt, cancel := context.WithTimeout(ctx, min(c.timeout, time.Second))
		err := c.Health(attempt)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return errdefs.WithMessage(errdefs.ErrTimeout, fmt.Sprintf(
				"the sandbox's executor did not become ready within %s: %v", time.Since(start).Round(time.Millisecond), err))
		}
		if errors.Is(err, errdefs.ErrUnauthenticated) {
			return err // it answers, and will never accept us
		}
		if fd, perr := c.openSocket(); errors.Is(perr, ErrNotSocket) {
			// Something in the sandbox put a symlink or a file where
			// the socket goes: no executor will answer there.
			return errdefs.WithMessage(errdefs.ErrUnavailable,
				"the sandbox's executor socket was replaced by something that is not a socket (from inside the sandbox); it cannot be reached")
		} else if perr == nil {
			unix.Close(fd)
		}
		if time.Since(start) > time.Second {
			delay = 2 * time.Millisecond
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
}

// WaitReady dials the executor at socketPath and waits until it answers.
func WaitReady(ctx context.Context, socketPath, token string, opts ...Option) (*Client, error) {
	c, err := Dial(ctx, socketPath, token, opts...)
	if err != nil {
		return nil, err
	}
	if err := c.WaitReady(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// bigChunks makes HTTP/1.1 request bodies go out in chunks as large as the
// messages written to them. The transport copies a body with io.Copy, whose
// 32 KiB buffer would otherwise cut each 256 KiB message into 8 chunks, each
// one write (and one read on the executor's side: syscalls gVisor makes
// expensive); a body that is an io.WriterTo gets to choose.
type bigChunks struct{ base http.RoundTripper }

func (t bigChunks) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody {
		r := *req
		r.Body = &chunkingBody{req.Body}
		req = &r
	}
	return t.base.RoundTrip(req)
}

type chunkingBody struct{ io.ReadCloser }

var bigChunkPool = sync.Pool{New: func() any { b := make([]byte, 2*chunkSize); return &b }}

func (b *chunkingBody) WriteTo(w io.Writer) (int64, error) {
	bp := bigChunkPool.Get().(*[]byte)
	defer bigChunkPool.Put(bp)
	buf := *bp
	var total int64
	for {
		// Gather at least a message's worth (a pipe read returns one write).
		n, err := 0, error(nil)
		for n < chunkSize && err == nil {
			var m int
			m, err = b.Read(buf[n:])
			n += m
		}
		if n > 0 {
			m, werr := w.Write(buf[:n])
			total += int64(m)
			if werr != nil {
				return total, werr
			}
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}
