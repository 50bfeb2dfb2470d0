// Package client is the Go client of reins serve: sandboxes, and the
// processes and files inside them. The CLI is built on it.
package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/api/reins/executor/v1/executorv1connect"
	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/api/reins/v1/reinsv1connect"
	"github.com/reinsdev/reins/errdefs"
)

// DefaultURL is where reins serve listens unless told otherwise.
const DefaultURL = "http://127.0.0.1:7070"

// SandboxHeader names the sandbox an executor call is for (see server).
const SandboxHeader = "Reins-Sandbox"

// Client talks to one reins serve.
type Client struct {
	URL       string
	token     string
	http      *http.Client
	sandboxes reinsv1connect.SandboxServiceClient
}

// New returns a client of the service at url, using token.
func New(url, token string) *Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Protocols = new(http.Protocols)
	t.Protocols.SetUnencryptedHTTP2(true)
	t.Protocols.SetHTTP2(true)
	// Large frames and windows: a download of a file comes at the speed
	// of the host's disk (staged transfers), and 16 KiB frames cost more
	// than the bytes in them.
	t.HTTP2 = &http.HTTP2Config{MaxReadFrameSize: 1 << 20, MaxReceiveBufferPerStream: 8 << 20, MaxReceiveBufferPerConnection: 16 << 20}
	t.ResponseHeaderTimeout = 0
	return NewWithHTTPClient(url, token, &http.Client{Transport: t})
}

// NewWithHTTPClient returns a client of the service at url, using token,
// that sends its requests through hc's transport (which must speak
// HTTP/2 for the streaming calls: h2c for an http:// url). Many clients
// may share one hc: an in-process client of the service's own handler
// (reins serve's E2B front end) makes one per caller over one transport.
func NewWithHTTPClient(url, token string, hc *http.Client) *Client {
	rt := hc.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	own := &http.Client{Transport: withToken{rt: rt, token: token}, Timeout: hc.Timeout}
	url = strings.TrimRight(withScheme(url), "/")
	return &Client{
		URL:       url,
		token:     token,
		http:      own,
		sandboxes: reinsv1connect.NewSandboxServiceClient(own, url),
	}
}

// Close drops the client's idle connections. A Client needs no closing
// to be collected; a program that makes many may call it to free sockets.
func (c *Client) Close() {
	c.http.CloseIdleConnections()
}

// withScheme makes an address without a scheme ("localhost:7070", as
// docker's DOCKER_HOST habit has people write it) an http URL.
func withScheme(url string) string {
	if url == "" || strings.Contains(url, "://") {
		return url
	}
	return "http://" + url
}

// FromEnv returns a client configured by REINS_URL (http:// when it names
// no scheme) and REINS_TOKEN.
func FromEnv() (*Client, error) {
	url := os.Getenv("REINS_URL")
	if url == "" {
		url = DefaultURL
	}
	token := os.Getenv("REINS_TOKEN")
	if token == "" {
		return nil, errors.New("REINS_TOKEN is not set: export REINS_TOKEN=$(cat DATA_DIR/admin.token), where DATA_DIR is reins serve's --data-dir")
	}
	return New(url, token), nil
}

type withToken struct {
	rt      http.RoundTripper
	token   string
	sandbox string
}

func (w withToken) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+w.token)
	if w.sandbox != "" {
		r.Header.Set(SandboxHeader, w.sandbox)
	}
	return w.rt.RoundTrip(r)
}

// wrap turns a wire error into an errdefs kind, and a refused connection into
// advice.
func (c *Client) wrap(err error) error {
	if err == nil {
		return nil
	}
	// The service's own errors are answers; a refused dial is this side's
	// transport finding nobody at the address.
	if errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("cannot reach reins serve at %s: is it running? (start it with `reins serve --data-dir DIR`, or set REINS_URL): %w", c.URL, errdefs.ErrUnavailable)
	}
	return errdefs.FromConnect(err)
}

// Create makes a sandbox, calling progress (if not nil) with each step.
func (c *Client) Create(ctx context.Context, spec *reinsv1.SandboxSpec, progress func(*reinsv1.Progress)) (*reinsv1.Sandbox, error) {
	stream, err := c.sandboxes.Create(ctx, connect.NewRequest(&reinsv1.CreateSandboxRequest{Spec: spec}))
	if err != nil {
		return nil, c.wrap(err)
	}
	defer stream.Close()
	for stream.Receive() {
		switch m := stream.Msg().Msg.(type) {
		case *reinsv1.CreateSandboxResponse_Progress:
			if progress != nil {
				progress(m.Progress)
			}
		case *reinsv1.CreateSandboxResponse_Sandbox:
			return m.Sandbox, nil
		}
	}
	if err := stream.Err(); err != nil {
		return nil, c.wrap(err)
	}
	return nil, errors.New("the service ended the create stream without a sandbox")
}

// Get returns a sandbox.
func (c *Client) Get(ctx context.Context, id string) (*reinsv1.Sandbox, error) {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	resp, err := c.sandboxes.Get(ctx, connect.NewRequest(&reinsv1.GetSandboxRequest{Id: id}))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg.Sandbox, nil
}

// Version asks the service for its build and its backends' runtimes.
func (c *Client) Version(ctx context.Context) (*reinsv1.VersionResponse, error) {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	resp, err := c.sandboxes.Version(ctx, connect.NewRequest(&reinsv1.VersionRequest{}))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg, nil
}

// List returns the sandboxes that carry every label given.
func (c *Client) List(ctx context.Context, labels map[string]string) ([]*reinsv1.Sandbox, error) {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	resp, err := c.sandboxes.List(ctx, connect.NewRequest(&reinsv1.ListSandboxesRequest{Labels: labels}))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg.Sandboxes, nil
}

// PortURL returns a URL on the service that reaches port inside sandbox
// id; public makes it a signed link that expires after ttl (0: an hour).
func (c *Client) PortURL(ctx context.Context, id string, port int, public bool, ttl time.Duration) (*reinsv1.PortURLResponse, error) {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d is outside 1-65535", port)
	}
	resp, err := c.sandboxes.PortURL(ctx, connect.NewRequest(&reinsv1.PortURLRequest{
		Id: id, Port: int32(port), Public: public, TtlMs: ttl.Milliseconds(),
	}))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg, nil
}

// Delete stops a sandbox and removes everything it had.
func (c *Client) Delete(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	_, err := c.sandboxes.Delete(ctx, connect.NewRequest(&reinsv1.DeleteSandboxRequest{Id: id}))
	return c.wrap(err)
}

// Extend sets sandbox id's expiry to ttl from now.
func (c *Client) Extend(ctx context.Context, id string, ttl time.Duration) (*reinsv1.Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, UnaryTimeout)
	defer cancel()
	resp, err := c.sandboxes.Extend(ctx, connect.NewRequest(&reinsv1.ExtendSandboxRequest{Id: id, TtlMs: ttl.Milliseconds()}))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg.Sandbox, nil
}

// Pause keeps sandbox id's memory and processes and releases its compute;
// with orSuspend, a backend that cannot keep memory suspends it instead
// (the answer says so). Writing the memory out takes a while: the call
// has PauseTimeout.
func (c *Client) Pause(ctx context.Context, id string, orSuspend bool) (*reinsv1.PauseSandboxResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, PauseTimeout)
	defer cancel()
	resp, err := c.sandboxes.Pause(ctx, connect.NewRequest(&reinsv1.PauseSandboxRequest{Id: id, OrSuspend: orSuspend}))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg, nil
}

// PauseTimeout bounds a Pause: a sandbox's whole memory written to the
// service's disk.
const PauseTimeout = 5 * time.Minute

// UnaryTimeout bounds calls that return one answer, so a service or an
// executor that does not answer fails the call instead of hanging it.
const UnaryTimeout = 60 * time.Second

func unaryDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, UnaryTimeout)
}

// Sandbox returns a client of the processes and files of sandbox id.
func (c *Client) Sandbox(id string) *Sandbox {
	wt := c.http.Transport.(withToken)
	wt.sandbox = id
	hc := &http.Client{Transport: wt}
	return &Sandbox{ID: id, c: c, hc: hc, rpc: executorv1connect.NewExecutorClient(hc, c.URL, connect.WithReadMaxBytes(MaxExecutorAnswer))}
}

// MaxExecutorAnswer bounds one message read from a sandbox's executor (a
// unary answer, a stream's message), as the service's own executor client
// bounds it: a modified executor may send any size, and the service's MCP
// and E2B front ends read it in the service's memory. The computer's
// screenshots have their own bound (MaxComputerAnswer).
const MaxExecutorAnswer = 64 << 20

// Sandbox reaches inside one sandbox through the service.
type Sandbox struct {
	ID  string
	c   *Client
	hc  *http.Client
	rpc executorv1connect.ExecutorClient
}

// RPC is the executor's API, for calls the helpers below do not cover.
func (s *Sandbox) RPC() executorv1connect.ExecutorClient { return s.rpc }

// Err converts an error from RPC() calls the way the helpers do.
func (s *Sandbox) Err(err error) error { return s.c.wrap(err) }

// Exec runs a process and calls onEvent with each event until it exits. It
// returns the exit, or nil for a background process.
func (s *Sandbox) Exec(ctx context.Context, req *executorv1.ExecRequest, onEvent func(*executorv1.ExecEvent)) (*executorv1.Exited, error) {
	stream, err := s.rpc.Exec(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, s.c.wrap(err)
	}
	return s.drain(stream, onEvent)
}

// Attach replays a process's output and, with follow, streams it to exit.
func (s *Sandbox) Attach(ctx context.Context, pid int32, follow bool, onEvent func(*executorv1.ExecEvent)) (*executorv1.Exited, error) {
	stream, err := s.rpc.Attach(ctx, connect.NewRequest(&executorv1.AttachRequest{Pid: pid, Follow: follow}))
	if err != nil {
		return nil, s.c.wrap(err)
	}
	return s.drain(stream, onEvent)
}

func (s *Sandbox) drain(stream *connect.ServerStreamForClient[executorv1.ExecEvent], onEvent func(*executorv1.ExecEvent)) (*executorv1.Exited, error) {
	defer stream.Close()
	var exited *executorv1.Exited
	for stream.Receive() {
		ev := stream.Msg()
		if x := ev.GetExited(); x != nil {
			exited = x
		}
		if onEvent != nil {
			onEvent(ev)
		}
	}
	if err := stream.Err(); err != nil {
		return exited, s.c.wrap(err)
	}
	return exited, nil
}

// Unary runs one unary executor call with the client's deadline; use it as
//
//	resp, err := client.Unary(ctx, sb, sb.RPC().Stat, &executorv1.StatRequest{Path: p})
func Unary[Req, Resp any](ctx context.Context, s *Sandbox, call func(context.Context, *connect.Request[Req]) (*connect.Response[Resp], error), req *Req) (*Resp, error) {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	resp, err := call(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, s.c.wrap(err)
	}
	return resp.Msg, nil
}

func connectRequest[T any](m *T) *connect.Request[T] { return connect.NewRequest(m) }
