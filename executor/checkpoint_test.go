package executor_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor"
	"github.com/reinsdev/reins/executor/client"
)

// hostEnv serves an executor on a HostListener, as reins-executor does.
type hostEnv struct {
	srv  *executor.Server
	sock string
	c    *client.Client
}

func newHostEnv(t *testing.T) *hostEnv {
	t.Helper()
	srv, err := executor.New(executor.Config{Root: t.TempDir(), Token: testToken,
		BaseEnv: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/", "LC_ALL=C"}})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "executor.sock")
	l, err := executor.ListenHost(sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	e := &hostEnv{srv: srv, sock: sock, c: dialT(t, sock, testToken)}
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return e
}

func dialT(t *testing.T, sock, token string) *client.Client {
	t.Helper()
	c, err := client.Dial(context.Background(), sock, token, client.WithCallTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawConn opens a connection to the socket and sends half a request, as
// a client in the middle of a call would hold it.
func rawConn(t *testing.T, sock string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	io.WriteString(c, "POST /reins.executor.v1.Executor/Hello HTTP/1.1\r\nHost: x\r\n")
	return c
}

// A release closes the socket and every connection on it, the processes
// carry on, and Relisten serves the same executor again.
func TestReleaseHostAndRelisten(t *testing.T) {
	e := newHostEnv(t)
	ctx := ctxT(t)
	st, err := e.c.Start(ctx, &executorv1.ExecRequest{Argv: []string{"sleep", "30"}, Background: true})
	if err != nil {
		t.Fatal(err)
	}
	held := rawConn(t, e.sock)
	time.Sleep(50 * time.Millisecond) // accepted
	if err := e.c.ReleaseHost(ctx); err != nil {
		t.Fatalf("ReleaseHost: %v", err)
	}
	if _, err := os.Lstat(e.sock); !os.IsNotExist(err) {
		t.Errorf("the socket is still there after the release (%v)", err)
	}
	held.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := held.Read(make([]byte, 64)); err != io.EOF {
		t.Errorf("a connection held over the release read %d bytes, %v; want it closed (EOF)", n, err)
	}
	if _, err := e.c.Hello(ctx); err == nil {
		t.Fatal("Hello answered while the host socket was released")
	}
	if err := e.srv.Relisten(); err != nil {
		t.Fatal(err)
	}
	c := dialT(t, e.sock, testToken)
	procs, err := c.ListProcesses(ctx)
	if err != nil {
		t.Fatalf("after Relisten: %v", err)
	}
	found := false
	for _, p := range procs {
		found = found || p.Pid == st.Pid && p.Running
	}
	if !found {
		t.Errorf("process %d started before the release is not running after it: %v", st.Pid, procs)
	}
	if err := e.srv.Relisten(); err != nil {
		t.Errorf("Relisten of a listening executor: %v", err)
	}
}

// An executor told nothing after a release listens again by itself.
func TestReleaseHostRelistensByItself(t *testing.T) {
	defer executor.SetRelistenAfter(300 * time.Millisecond)()
	e := newHostEnv(t)
	ctx := ctxT(t)
	if err := e.c.ReleaseHost(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := client.Dial(ctx, e.sock, testToken, client.WithCallTimeout(time.Second))
		if err == nil {
			_, err = c.Hello(ctx)
			c.Close()
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the executor did not listen again by itself: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Rekey: the old token stops working, the new one works; a caller without
// the current token can neither rekey nor release.
func TestRekey(t *testing.T) {
	e := newHostEnv(t)
	ctx := ctxT(t)
	const newToken = "the-new-token-9876543210"
	wrong := dialT(t, e.sock, "not-the-token")
	if err := wrong.Rekey(ctx, "attacker-token"); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Fatalf("rekey with a wrong token: %v, want unauthenticated", err)
	}
	if err := wrong.ReleaseHost(ctx); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Fatalf("release with a wrong token: %v, want unauthenticated", err)
	}
	if err := e.c.Rekey(ctx, newToken); err != nil {
		t.Fatalf("Rekey: %v", err)
	}
	if _, err := dialT(t, e.sock, testToken).Hello(ctx); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("the old token after a rekey: %v, want unauthenticated", err)
	}
	if _, err := dialT(t, e.sock, newToken).Hello(ctx); err != nil {
		t.Errorf("the new token after a rekey: %v", err)
	}
	if _, err := dialT(t, e.sock, "attacker-token").Hello(ctx); err == nil {
		t.Error("the token of the refused rekey works")
	}
}
