package e2b

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reinsdev/reins/api/e2b/envd/filesystem/filesystemconnect"
	"github.com/reinsdev/reins/api/e2b/envd/process/processconnect"
	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/internal/testenv"
	"github.com/reinsdev/reins/sandbox/gvisor"
)

// These tests drive envd's data plane with the connect-go clients
// generated from E2B's protos, against a real reins serve (built here)
// with real gVisor sandboxes of the debian image (bash is in it).

func TestMain(m *testing.M) {
	code := m.Run()
	svc.stop()
	os.Exit(code)
}

// service is the reins serve the package's tests share.
type service struct {
	once    sync.Once
	err     error
	dir     string // binaries and data dir
	url     string
	token   string
	cmd     *exec.Cmd
	log     bytes.Buffer
	stopped bool
}

var svc service

// reins returns the shared reins serve, started on first use.
func reins(t *testing.T) *service {
	t.Helper()
	testenv.RequiresRoot(t)
	testenv.RequiresRunsc(t, gvisor.DefaultRunsc())
	svc.once.Do(func() { svc.err = svc.start() })
	if svc.err != nil {
		t.Fatal(svc.err)
	}
	return &svc
}

func (s *service) start() error {
	dir, err := os.MkdirTemp("", "re2b")
	if err != nil {
		return err
	}
	s.dir = dir
	root, _ := filepath.Abs("../..")
	for _, b := range [][]string{
		{"go", "build", "-o", filepath.Join(dir, "reins"), "./cmd/reins"},
		{"go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(dir, "reins-executor"), "./cmd/reins-executor"},
		{"go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(dir, "reins-shim"), "./cmd/reins-shim"},
	} {
		cmd := exec.Command(b[0], b[1:]...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building %v: %v\n%s", b, err, out)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	ln.Close()
	data := filepath.Join(dir, "data")
	s.cmd = exec.Command(filepath.Join(dir, "reins"), "serve", "--data-dir", data, "--addr", addr, "--check-interval", "200ms")
	s.cmd.Stdout, s.cmd.Stderr = &s.log, &s.log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return err
	}
	s.url = "http://" + addr
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get(s.url + "/healthz"); err == nil {
			resp.Body.Close()
			tok, err := os.ReadFile(filepath.Join(data, "admin.token"))
			if err != nil {
				return err
			}
			s.token = strings.TrimSpace(string(tok))
			return nil
		}
	}
	return fmt.Errorf("reins serve did not come up:\n%s", s.log.String())
}

// stop deletes every sandbox left, stops reins serve and removes its
// data.
func (s *service) stop() {
	if s.cmd == nil || s.stopped {
		return
	}
	s.stopped = true
	c := client.New(s.url, s.token)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if list, err := c.List(ctx, nil); err == nil {
		for _, sb := range list {
			c.Delete(ctx, sb.Id)
		}
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
	os.RemoveAll(s.dir)
}

// envd is a data plane under test: the Handler on an HTTP server, the
// generated clients that reach one sandbox through it.
type envd struct {
	t       *testing.T
	h       *Handler
	url     string // h's
	sandbox string
	token   string // the access token the clients send (the create reply's envdAccessToken)
	c       *client.Client
	sb      *client.Sandbox
	proc    processconnect.ProcessClient
	fs      filesystemconnect.FilesystemClient
}

// newHandler serves a Handler for the shared reins serve.
func newHandler(t *testing.T, s *service) (*Handler, string) {
	h := New(Config{Client: func(tok string) *client.Client { return client.New(s.url, tok) }})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return h, srv.URL
}

// newEnvd makes a debian sandbox and clients of its data plane.
func newEnvd(t *testing.T) *envd {
	t.Helper()
	s := reins(t)
	c := client.New(s.url, s.token)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sb, err := c.Create(ctx, &reinsv1.SandboxSpec{Image: "debian"}, nil)
	if err != nil {
		t.Fatalf("creating a debian sandbox: %v\n%s", err, s.log.String())
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := c.Delete(ctx, sb.Id); err != nil {
			t.Errorf("deleting sandbox %s: %v", sb.Id, err)
		}
	})
	h, url := newHandler(t, s)
	e := &envd{t: t, h: h, url: url, sandbox: sb.Id, token: h.tokens.seal(sb.Id, s.token), c: c, sb: c.Sandbox(sb.Id)}
	e.proc, e.fs = e.clients(sb.Id, e.token)
	return e
}

// clients are the generated clients sending id and the access token as
// E2B's SDK does (E2B_SANDBOX_URL: one URL, the sandbox named in headers).
func (e *envd) clients(id, token string) (processconnect.ProcessClient, filesystemconnect.FilesystemClient) {
	hc := &http.Client{Transport: headers{rt: http.DefaultTransport, set: map[string]string{
		SandboxIDHeader: id, PortHeader: "49983", AccessTokenHeader: token,
	}}}
	return processconnect.NewProcessClient(hc, e.url), filesystemconnect.NewFilesystemClient(hc, e.url)
}

// httpClient is a plain client sending the data plane's headers.
func (e *envd) httpClient() *http.Client {
	return &http.Client{Transport: headers{rt: http.DefaultTransport, set: map[string]string{
		SandboxIDHeader: e.sandbox, PortHeader: "49983", AccessTokenHeader: e.token,
	}}}
}

type headers struct {
	rt  http.RoundTripper
	set map[string]string
}

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.set {
		r.Header.Set(k, v)
	}
	return h.rt.RoundTrip(r)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
