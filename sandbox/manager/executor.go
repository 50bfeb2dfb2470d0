package manager

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/api/reins/executor/v1/executorv1connect"
	"github.com/reinsdev/reins/errdefs"
)

// Executor is a connection to one sandbox's executor: an HTTP/2 transport
// over its unix socket and the token it wants.
type Executor struct {
	Socket    string
	Token     string
	Transport *http.Transport
	// Bulk is an HTTP/1.1 transport for Upload and Download: HTTP/2's
	// small frames and window updates cost syscalls that gVisor makes dear.
	Bulk   *http.Transport
	Client executorv1connect.ExecutorClient
}

// BaseURL is the URL prefix requests to the executor use; the host part is
// ignored by the unix-socket transport.
const BaseURL = "http://executor"

// newExecutor returns a connection that waits at most answer for the
// executor to start answering a call (response headers; a stream's first
// event is sent at once), so a frozen or wedged sandbox fails the call
// instead of hanging it.
func newExecutor(socket, token string, answer time.Duration) *Executor {
	t := &http.Transport{
		ResponseHeaderTimeout: answer,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialUnix(ctx, socket)
		},
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
	}
	t.Protocols = new(http.Protocols)
	t.Protocols.SetUnencryptedHTTP2(true)
	// Big frames and windows: under gVisor every read the executor makes
	// is costly, so fewer, larger frames move files faster.
	t.HTTP2 = &http.HTTP2Config{
		MaxReadFrameSize:              1 << 20,
		MaxReceiveBufferPerConnection: 32 << 20,
		MaxReceiveBufferPerStream:     16 << 20,
	}
	bulk := &http.Transport{
		DialContext:         t.DialContext,
		MaxIdleConnsPerHost: 2,
		WriteBufferSize:     256 << 10,
		ReadBufferSize:      256 << 10,
		DisableCompression:  true,
	}
	e := &Executor{Socket: socket, Token: token, Transport: t, Bulk: bulk}
	e.Client = executorv1connect.NewExecutorClient(&http.Client{Transport: withToken{t, token}}, BaseURL)
	return e
}

// Close drops idle connections.
func (e *Executor) Close() {
	e.Transport.CloseIdleConnections()
	e.Bulk.CloseIdleConnections()
}

// dialUnix connects to a unix socket whose path may be longer than the
// 108 bytes a socket address holds, by going through /proc/self/fd.
func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	if len(path) < 100 {
		return d.DialContext(ctx, "unix", path)
	}
	dir, err := os.OpenFile(filepath.Dir(path), unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	return d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(path)))
}

// withToken adds the executor's token to every request, streaming or not.
type withToken struct {
	rt    http.RoundTripper
	token string
}

func (w withToken) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+w.token)
	return w.rt.RoundTrip(r)
}

// waitExecutor polls until the executor answers Health or ctx ends. It sits
// on the create path, so it polls often.
func waitExecutor(ctx context.Context, socket, token string, answer time.Duration) (*Executor, error) {
	e := newExecutor(socket, token, answer)
	delay := 500 * time.Microsecond
	var last error
	for {
		if _, err := os.Stat(socket); err == nil {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err = e.Client.Health(cctx, connect.NewRequest(&executorv1.HealthRequest{}))
			cancel()
			if err == nil {
				return e, nil
			}
			last = errdefs.FromConnect(err)
		}
		select {
		case <-ctx.Done():
			e.Close()
			if last == nil {
				last = fmt.Errorf("its socket never appeared")
			}
			return nil, fmt.Errorf("%w (%v)", last, context.Cause(ctx))
		case <-time.After(delay):
		}
		if delay < 2*time.Millisecond {
			delay *= 2
		}
	}
}
