package executor_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor"
)

// watch starts a Watch and returns its events as they come, once started.
func (e *testEnv) watch(ctx context.Context, p string, recursive bool) (<-chan *executorv1.WatchEvent, <-chan error) {
	e.t.Helper()
	stream, err := e.c.RPC().Watch(ctx, connect.NewRequest(&executorv1.WatchRequest{Path: p, Recursive: recursive}))
	if err != nil {
		e.t.Fatal(err)
	}
	if !stream.Receive() {
		e.t.Fatalf("Watch %s ended before it started: %v", p, stream.Err())
	}
	if stream.Msg().GetStarted() == nil {
		e.t.Fatalf("Watch's first event = %v, want started", stream.Msg())
	}
	events, done := make(chan *executorv1.WatchEvent, 100), make(chan error, 1)
	go func() {
		defer stream.Close()
		for stream.Receive() {
			events <- stream.Msg()
		}
		done <- stream.Err()
	}()
	return events, done
}

// watchRefused is the error a Watch of p that must not start ends with.
func (e *testEnv) watchRefused(ctx context.Context, p string) error {
	e.t.Helper()
	stream, err := e.c.RPC().Watch(ctx, connect.NewRequest(&executorv1.WatchRequest{Path: p}))
	if err != nil {
		return err
	}
	defer stream.Close()
	for stream.Receive() {
		e.t.Errorf("Watch %s sent %v", p, stream.Msg())
	}
	return errdefs.FromConnect(stream.Err())
}

// nextChange waits for a change of p with op, skipping others.
func nextChange(t *testing.T, events <-chan *executorv1.WatchEvent, p string, op executorv1.ChangeOp) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-events:
			if c := ev.GetChange(); c != nil && c.Path == p && c.Op == op {
				return
			}
		case <-timeout:
			t.Fatalf("no %v of %s in 10s", op, p)
		}
	}
}

func TestWatch(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	e.writeHost("w/sub/old", "x")
	events, _ := e.watch(ctx, "/w", true)
	e.writeHost("w/new.txt", "hello")
	nextChange(t, events, "/w/new.txt", executorv1.ChangeOp_CHANGE_OP_CREATE)
	nextChange(t, events, "/w/new.txt", executorv1.ChangeOp_CHANGE_OP_WRITE)
	// A directory there before the watch, and one made after it, are
	// watched too.
	e.writeHost("w/sub/deep.txt", "x")
	nextChange(t, events, "/w/sub/deep.txt", executorv1.ChangeOp_CHANGE_OP_CREATE)
	if err := os.Mkdir(e.host("w/later"), 0o755); err != nil {
		t.Fatal(err)
	}
	nextChange(t, events, "/w/later", executorv1.ChangeOp_CHANGE_OP_CREATE)
	e.writeHost("w/later/x", "x")
	nextChange(t, events, "/w/later/x", executorv1.ChangeOp_CHANGE_OP_CREATE)
	if err := os.Rename(e.host("w/new.txt"), e.host("w/renamed.txt")); err != nil {
		t.Fatal(err)
	}
	nextChange(t, events, "/w/new.txt", executorv1.ChangeOp_CHANGE_OP_RENAME)
	nextChange(t, events, "/w/renamed.txt", executorv1.ChangeOp_CHANGE_OP_CREATE)
	if err := os.Chmod(e.host("w/renamed.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	nextChange(t, events, "/w/renamed.txt", executorv1.ChangeOp_CHANGE_OP_CHMOD)
	if err := os.Remove(e.host("w/renamed.txt")); err != nil {
		t.Fatal(err)
	}
	nextChange(t, events, "/w/renamed.txt", executorv1.ChangeOp_CHANGE_OP_REMOVE)
}

func TestWatchNotRecursive(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	e.writeHost("w/sub/x", "x")
	events, _ := e.watch(ctx, "/w", false)
	e.writeHost("w/sub/y", "y") // not reported
	e.writeHost("w/top", "t")
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-events:
			if c := ev.GetChange(); c != nil && c.Path == "/w/sub/y" {
				t.Fatalf("a change under a subdirectory was reported without recursive: %v", c)
			} else if c != nil && c.Path == "/w/top" {
				return
			}
		case <-timeout:
			t.Fatal("no change of /w/top")
		}
	}
}

func TestWatchErrors(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	e.writeHost("f", "x")
	for _, tc := range []struct {
		path string
		kind error
	}{{"/nope", errdefs.ErrNotFound}, {"/f", errdefs.ErrInvalidArgument}, {"/../..", errdefs.ErrPermissionDenied}} {
		wantKind(t, e.watchRefused(ctx, tc.path), tc.kind, "")
	}
}

// TestHostileWatchFlood: a sandbox that changes files faster than the
// caller reads loses events, counted and reported, and the executor's
// memory stays bounded (the buffer), instead of growing without end.
func TestHostileWatchFlood(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	e.writeHost("w/.keep", "")
	stream, err := e.c.RPC().Watch(ctx, connect.NewRequest(&executorv1.WatchRequest{Path: "/w"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetStarted() == nil {
		t.Fatalf("not started: %v", stream.Err())
	}
	// Nobody reads while far more changes happen than the buffer and the
	// connection's flow-control windows hold (long names: each change is
	// over 200 bytes on the wire).
	long := strings.Repeat("n", 200)
	const files = 60000
	for i := range files {
		e.writeHost(fmt.Sprintf("w/%s%d", long, i), "")
	}
	var changes, dropped uint64
	for dropped == 0 && stream.Receive() {
		if d := stream.Msg().GetDropped(); d > 0 {
			dropped = d
		} else if stream.Msg().GetChange() != nil {
			changes++
		}
		if changes >= files*2 {
			break
		}
	}
	if dropped == 0 {
		t.Fatalf("no loss reported after %d files made (%d changes delivered): the buffer is unbounded or the loss silent", files, changes)
	}
}

// TestHostileWatchCount: an executor keeps a bounded number of watches.
func TestHostileWatchCount(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	e.writeHost("w/.keep", "")
	for range executor.MaxWatches {
		e.watch(ctx, "/w", false)
	}
	wantKind(t, e.watchRefused(ctx, "/w"), errdefs.ErrResourceExhausted, "watches")
}

// TestStatOwner: a file's owner and group are named from the sandbox's
// own /etc/passwd and /etc/group (inside the root), not the host's.
func TestStatOwner(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	uid, gid := os.Getuid(), os.Getgid()
	e.writeHost("etc/passwd", fmt.Sprintf("bad line\nsandboxer:x:%d:%d::/home/s:/bin/sh\n", uid, gid))
	e.writeHost("etc/group", fmt.Sprintf("crew:x:%d:\n", gid))
	e.writeHost("f", "x")
	info, err := e.c.Stat(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	if info.Uid != uint32(uid) || info.Gid != uint32(gid) || info.Owner != "sandboxer" || info.Group != "crew" {
		t.Errorf("Stat = uid %d gid %d owner %q group %q, want %d %d sandboxer crew", info.Uid, info.Gid, info.Owner, info.Group, uid, gid)
	}
}

// TestListProcessesEnvCwd: a process is listed with the variables its
// Exec gave and its working directory.
func TestListProcessesEnvCwd(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	if err := os.Mkdir(e.host("wd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Exec(ctx, &executorv1.ExecRequest{Argv: []string{"true"}, Env: []string{"A=1"}, Cwd: "/wd"}, nil); err != nil {
		t.Fatal(err)
	}
	list, err := e.c.RPC().ListProcesses(ctx, connect.NewRequest(&executorv1.ListProcessesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.Msg.Processes); n != 1 {
		t.Fatalf("%d processes listed, want 1", n)
	}
	p := list.Msg.Processes[0]
	if len(p.Env) != 1 || p.Env[0] != "A=1" || p.Cwd != "/wd" {
		t.Errorf("listed env %q cwd %q, want [A=1] /wd", p.Env, p.Cwd)
	}
}
