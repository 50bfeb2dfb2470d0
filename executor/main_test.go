package executor_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor"
	"github.com/reinsdev/reins/executor/client"
)

// These tests run the executor in-process on a real unix socket and talk to
// it with the real client. The test binary makes itself a child subreaper,
// as the executor is (init) in a sandbox: orphans come to it and the reaper
// must reap them (wait4(-1)) without stealing its own processes' statuses.
// So nothing in these tests may use os/exec.
func TestMain(m *testing.M) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		panic(err)
	}
	// net/http lingers 500ms before closing a connection whose request
	// body was not read (a refused upload): a sleep, not a leak.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait"))
}

const testToken = "test-token-0123456789"

type testEnv struct {
	t    testing.TB
	c    *client.Client
	srv  *executor.Server
	root string
	sock string
}

func newEnv(t testing.TB, opts ...func(*executor.Config)) *testEnv {
	t.Helper()
	root := t.TempDir()
	cfg := executor.Config{
		Root:    root,
		Token:   testToken,
		BaseEnv: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/", "LC_ALL=C"},
	}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := executor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "executor.sock")
	l, err := executor.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	c, err := client.Dial(context.Background(), sock, cfg.Token, client.WithCallTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &testEnv{t: t, c: c, srv: srv, root: cfg.Root, sock: sock}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// run runs a shell command and returns its output and exit.
func (e *testEnv) sh(script string) (string, string, *executorv1.Exited) {
	e.t.Helper()
	out, errOut, exit, err := e.c.Run(ctxT(e.t), "sh", "-c", script)
	if err != nil {
		e.t.Fatalf("sh -c %q: %v", script, err)
	}
	return string(out), string(errOut), exit
}

// host is the host path of a sandbox path.
func (e *testEnv) host(p string) string { return filepath.Join(e.root, p) }

func (e *testEnv) writeHost(p, content string) {
	e.t.Helper()
	if err := os.MkdirAll(filepath.Dir(e.host(p)), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(e.host(p), []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

func wantKind(t *testing.T, err, kind error, contains ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", kind)
	}
	if !errors.Is(err, kind) {
		t.Fatalf("got %v (kind %v), want kind %v", err, errdefs.Kind(err), kind)
	}
	for _, s := range contains {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestNewRefusesUnsafeConfig(t *testing.T) {
	if _, err := executor.New(executor.Config{Token: "x"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("empty Root: got %v, want invalid argument", err)
	}
	if _, err := executor.New(executor.Config{Root: t.TempDir()}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("empty Token: got %v, want invalid argument", err)
	}
}

// TestCloseBeforeServe: a server closed before its Serve goroutine got to
// run must not serve forever.
func TestCloseBeforeServe(t *testing.T) {
	srv, err := executor.New(executor.Config{Root: t.TempDir(), Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	l, err := executor.Listen(filepath.Join(t.TempDir(), "x.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		l.Close()
		<-done
		t.Fatal("Serve after Close is still serving")
	}
}

func TestHelloHealthUsage(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	h, err := e.c.Hello(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.ApiVersion != 1 || h.Version == "" || h.Pid != int32(os.Getpid()) || len(h.Capabilities) == 0 {
		t.Errorf("Hello = %v", h)
	}
	if err := e.c.Health(ctx); err != nil {
		t.Fatal(err)
	}

	before := time.Now()
	started, err := e.c.Start(ctx, &executorv1.ExecRequest{Argv: []string{"sleep", "0.4"}})
	if err != nil {
		t.Fatal(err)
	}
	u, err := e.c.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if u.RunningExecs != 1 || u.Processes == 0 || u.DiskTotalBytes == 0 || u.ExecutorRssBytes == 0 || u.MemoryBytes == 0 {
		t.Errorf("Usage while one process runs = %v", u)
	}
	// While a process runs, the sandbox is active: now.
	time.Sleep(100 * time.Millisecond)
	if got := e.srv.LastActivity(); time.Since(got) > 50*time.Millisecond {
		t.Errorf("LastActivity while a process runs = %v ago, want now", time.Since(got))
	}
	if _, err := e.c.Attach(ctx, started.Pid, true, nil); err != nil {
		t.Fatal(err)
	}
	idle := e.srv.LastActivity()
	if idle.Before(before) {
		t.Errorf("LastActivity %v is before the exec", idle)
	}
	time.Sleep(50 * time.Millisecond)
	if got := e.srv.LastActivity(); got.Sub(idle).Abs() > time.Millisecond {
		t.Errorf("LastActivity moved with nothing happening: %v then %v", idle, got)
	}
}

func TestAuth(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	for _, tok := range []string{"wrong", testToken + "x", "Bearer " + testToken} {
		c, err := client.Dial(ctx, e.sock, tok)
		if err != nil {
			t.Fatal(err)
		}
		err = c.Health(ctx)
		wantKind(t, err, errdefs.ErrUnauthenticated, "token")
		_, _, _, err = c.Run(ctx, "true")
		wantKind(t, err, errdefs.ErrUnauthenticated)
		_, err = c.Upload(ctx, "/x", strings.NewReader(""))
		wantKind(t, err, errdefs.ErrUnauthenticated)
		c.Close()
	}
	if _, err := e.c.Stat(ctx, "/"); err != nil {
		t.Fatalf("the right token: %v", err)
	}
}

func connectReq[T any](m *T) *connect.Request[T] { return connect.NewRequest(m) }

// Sync answers, and it is not activity: the service asks it before it
// saves an idle sandbox, which must stay idle.
func TestSyncIsNotActivity(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	if err := e.c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	before := e.srv.LastActivity()
	time.Sleep(20 * time.Millisecond)
	if err := e.c.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.srv.LastActivity(); got.Sub(before).Abs() > time.Millisecond {
		t.Errorf("LastActivity moved at a Sync: %v then %v", before, got)
	}
}
