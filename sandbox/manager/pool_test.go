package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor"
	"github.com/reinsdev/reins/internal/testenv"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/fake"
	"github.com/reinsdev/reins/sandbox/gvisor"
)

// newPoolManager returns a Manager over the fake backend whose warm pool
// holds ready[key] sandboxes per key, in memory only (running, no
// executor: a hand-out that needs none changes only records). Its images
// fail every resolve, so a create that goes cold fails and is counted.
func newPoolManager(t *testing.T, ready map[string]int, limits map[string]int) (*Manager, *noImages) {
	t.Helper()
	dir := t.TempDir()
	exe := filepath.Join(dir, "reins-executor")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	images := &noImages{}
	var keys []PoolSize
	for k, n := range ready {
		keys = append(keys, PoolSize{Image: k, Size: n})
	}
	m, err := New(Config{
		Dir: filepath.Join(dir, "sandboxes"), ExecutorPath: exe,
		Backends: map[string]sandbox.Backend{"fake": fake.New()}, DefaultBackend: "fake",
		Images: images, DiskPool: -1, Pool: keys, Logger: slog.New(slog.DiscardHandler),
		MaxSandboxes: func(_ context.Context, tenant string) (int, error) { return limits[tenant], nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	for k, n := range ready {
		for i := range n {
			id := fmt.Sprintf("pool%s%d", strings.NewReplacer(":", "", "/", "").Replace(k), i)
			b := &box{dir: filepath.Join(m.cfg.Dir, id), rec: Record{Info: sandbox.Info{ID: id, State: sandbox.StateRunning,
				Spec: m.warm.specs[k], CreatedAt: time.Now()}, Token: newToken()}}
			if err := os.MkdirAll(b.dir, 0o700); err != nil {
				t.Fatal(err)
			}
			b.rec.Endpoint.Unix = hostExecutor(t, b.rec.Token)
			m.boxes[id] = b
			m.warm.add(k, b, false)
		}
	}
	return m, images
}

// hostExecutor serves an executor in this process, confined to a
// directory of its own, on a unix socket it returns; the test's end stops
// it.
func hostExecutor(t *testing.T, token string) string {
	t.Helper()
	srv, err := executor.New(executor.Config{Root: t.TempDir(), Token: token})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "x.sock")
	l, err := executor.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Serve(l); close(done) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return sock
}

// 50 creates at once for a pool of 50: each that is admitted gets a
// sandbox of its own, none is handed to two callers, and the quota is
// kept exactly (40), atomically with the hand-out; the refused ones leave
// their sandbox in the pool. None went cold.
func TestPoolConcurrentHandOut(t *testing.T) {
	m, images := newPoolManager(t, map[string]int{"busybox": 50}, map[string]int{"acme": 40})
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[string]int{}
	refused := 0
	for i := range 50 {
		wg.Go(func() {
			info, err := m.Create(ctx, "acme", sandbox.Spec{Image: "busybox", Labels: map[string]string{"n": fmt.Sprint(i)}, TTL: time.Hour}, nil)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, errdefs.ErrResourceExhausted):
				refused++
			case err != nil:
				t.Errorf("create %d: %v", i, err)
			default:
				got[info.ID]++
				if info.Spec.Labels["n"] != fmt.Sprint(i) || info.Tenant != "acme" {
					t.Errorf("create %d got %s with labels %v, tenant %q", i, info.ID, info.Spec.Labels, info.Tenant)
				}
			}
		})
	}
	wg.Wait()
	if len(got) != 40 || refused != 10 {
		t.Fatalf("%d distinct sandboxes handed out and %d refused, want 40 and 10 (quota 40)", len(got), refused)
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("sandbox %s handed to %d callers", id, n)
		}
		if !strings.HasPrefix(id, "pool") {
			t.Errorf("sandbox %s is not one of the pool's", id)
		}
	}
	if images.calls != 0 {
		t.Errorf("%d creates went cold", images.calls)
	}
	if st := m.Pool(); len(st) != 1 || st[0].Ready != 10 {
		t.Errorf("pool after: %+v, want 10 ready", st)
	}
	if n := len(m.List(ctx, "acme", nil)); n != 40 {
		t.Errorf("acme lists %d sandboxes, want 40", n)
	}
}

// A handed-out sandbox looks freshly created: the tenant's, its labels,
// TTL counted from the hand-out, CreatedAt now, the pool label gone; the
// record on disk says the same.
func TestPoolHandOutRecord(t *testing.T) {
	m, _ := newPoolManager(t, map[string]int{"busybox": 1}, nil)
	ctx := context.Background()
	if n := len(m.List(ctx, "acme", nil)); n != 0 {
		t.Fatalf("a tenant sees %d pool sandboxes", n)
	}
	admin := m.List(ctx, "", nil)
	if len(admin) != 1 || admin[0].Spec.Labels[LabelPool] != "busybox" {
		t.Fatalf("the admin's list does not show the pool sandbox marked: %+v", admin)
	}
	before := time.Now()
	info, err := m.Create(ctx, "acme", sandbox.Spec{Image: "busybox", TTL: 10 * time.Minute, IdleTimeout: time.Minute,
		Labels: map[string]string{"team": "a"}, OnExpire: sandbox.ExpireDelete}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := readRecord(filepath.Join(m.cfg.Dir, info.ID))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []sandbox.Info{info, rec.Info} {
		switch {
		case r.ID != admin[0].ID:
			t.Errorf("got %s, not the pool's %s", r.ID, admin[0].ID)
		case r.Tenant != "acme" || r.Spec.Labels["team"] != "a" || r.Spec.Labels[LabelPool] != "":
			t.Errorf("tenant %q, labels %v", r.Tenant, r.Spec.Labels)
		case r.CreatedAt.Before(before) || r.ExpiresAt.Sub(r.CreatedAt) != 10*time.Minute:
			t.Errorf("created %v (hand-out at %v), expires %v", r.CreatedAt, before, r.ExpiresAt)
		case r.Spec.IdleTimeout != time.Minute || r.Spec.OnExpire != sandbox.ExpireDelete:
			t.Errorf("spec %+v", r.Spec)
		}
	}
	if _, err := m.Get(ctx, "beta", info.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another tenant gets the handed-out sandbox: %v", err)
	}
	evs, _, err := m.Events("acme", info.ID, 0)
	if err != nil || len(evs) != 1 || evs[0].Kind != EventCreated || evs[0].Tenant != "acme" || !strings.Contains(evs[0].Message, "warm pool") {
		t.Errorf("the handed-out sandbox's events: %+v %v, want one created event of acme's", evs, err)
	}
}

// The warm pool's configuration is the operator's and is checked at New.
func TestPoolConfigRefused(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "reins-executor")
	os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755)
	for _, keys := range [][]PoolSize{
		{{Image: "", Size: 1}},
		{{Image: " busybox", Size: 1}},
		{{Image: "busybox", Size: 0}},
		{{Image: "busybox", Size: MaxPoolSize + 1}},
		{{Image: "busybox", Size: 1}, {Image: "busybox", Size: 2}},
	} {
		_, err := New(Config{Dir: filepath.Join(dir, "sb"), ExecutorPath: exe, Backends: map[string]sandbox.Backend{"fake": fake.New()},
			DefaultBackend: "fake", Images: &noImages{}, DiskPool: -1, Pool: keys})
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "warm pool") {
			t.Errorf("pool %+v: %v, want an invalid argument naming the warm pool", keys, err)
		}
	}
}

// waitPool waits until key's pool has n ready sandboxes and returns their
// ids, oldest first.
func waitPool(t *testing.T, m *Manager, key string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		m.warm.mu.Lock()
		var ids []string
		for _, b := range m.warm.ready[key] {
			if !b.stopped.Load() {
				ids = append(ids, b.rec.ID)
			}
		}
		m.warm.mu.Unlock()
		if len(ids) == n {
			return ids
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool %s has %d ready, want %d", key, len(ids), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The pool in real gVisor sandboxes: filled in the background, a create
// gets one of its sandboxes with the spec's env, workdir, labels and
// tenant applied, each with its own token and disk; the pool refills; a
// spec with other limits goes cold and works; a tenant at its quota is
// refused though the pool has sandboxes. A restarted manager takes the
// pool's sandboxes back, and removes them once their key is gone.
func TestPoolGvisor(t *testing.T) {
	dir, exe, gv := newGvisor(t)
	limits := map[string]int{"acme": 2}
	withPool := func(n int) func(*Config) {
		return func(c *Config) {
			if n > 0 {
				c.Pool = []PoolSize{{Image: "busybox", Size: n}}
			}
			c.MaxSandboxes = func(_ context.Context, tenant string) (int, error) { return limits[tenant], nil }
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := func(n int) (*Manager, func()) {
		m := realManager(t, dir, exe, "gvisor", gv, withPool(n))
		if err := m.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		pctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { m.RunPool(pctx); close(done) }()
		return m, func() { stop(); <-done; m.Close() }
	}
	m, stop := start(2)
	defer func() {
		for _, info := range m.List(context.Background(), "", nil) {
			m.Delete(context.Background(), "", info.ID)
		}
	}()
	ready := waitPool(t, m, "busybox", 2)
	for _, id := range ready {
		info, err := m.Get(ctx, "", id)
		if err != nil || info.Spec.Labels[LabelPool] != "busybox" || info.Spec.Labels[LabelPoolReady] != "true" {
			t.Errorf("the admin's view of ready pool sandbox %s: labels %v, %v", id, info.Spec.Labels, err)
		}
	}

	var handed []sandbox.Info
	for i, wd := range []string{"", "/srv/app"} {
		info, err := m.Create(ctx, "acme", sandbox.Spec{Image: "busybox", Env: []string{fmt.Sprintf("POOLVAR=v%d", i)}, Workdir: wd,
			Labels: map[string]string{"i": fmt.Sprint(i)}, TTL: time.Hour}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if info.ID != ready[i] {
			t.Fatalf("create %d got %s, not the pool's oldest %s", i, info.ID, ready[i])
		}
		c, err := m.Client(ctx, "acme", info.ID)
		if err != nil {
			t.Fatal(err)
		}
		// Its events begin at the hand-out, not at the pool's create.
		if evs, _, err := m.Events("acme", info.ID, 0); err != nil || len(evs) != 1 || evs[0].Tenant != "acme" {
			t.Errorf("events of a handed-out sandbox: %+v %v", evs, err)
		}
		// The pool's warm-up exec is not the new user's to see.
		if procs, err := c.ListProcesses(ctx); err != nil || len(procs) != 0 {
			t.Errorf("a handed-out sandbox lists processes %v (%v), want none", procs, err)
		}
		out, _, _, err := c.Run(ctx, "sh", "-c", `echo "$POOLVAR $HOME"; pwd; echo mine > own.txt`)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("v%d /root\n%s\n", i, cmpOr(wd, "/workspace"))
		if string(out) != want {
			t.Errorf("sandbox %d: env and workdir %q, want %q", i, out, want)
		}
		handed = append(handed, info)
	}
	if m.boxes[handed[0].ID].rec.Token == m.boxes[handed[1].ID].rec.Token {
		t.Error("two pool sandboxes share an executor token")
	}
	// Each has its own disk: the first's file is not in the second.
	c1, _ := m.Client(ctx, "acme", handed[1].ID)
	if out, _, _, _ := c1.Run(ctx, "sh", "-c", "cat /workspace/own.txt 2>&1"); strings.Contains(string(out), "mine") {
		t.Error("the second pool sandbox sees the first's file")
	}
	refilled := waitPool(t, m, "busybox", 2)
	for _, id := range refilled {
		if id == handed[0].ID || id == handed[1].ID {
			t.Errorf("refilled pool holds handed-out %s", id)
		}
	}
	// acme is at its quota (2): refused, and the pool keeps its sandboxes.
	if _, err := m.Create(ctx, "acme", sandbox.Spec{Image: "busybox"}, nil); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("a tenant at its quota: %v", err)
	}
	// Other limits: cold, and it works.
	cold, err := m.Create(ctx, "", sandbox.Spec{Image: "busybox", Limits: sandbox.Limits{MemoryBytes: 256 << 20}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cold.ID == refilled[0] || cold.ID == refilled[1] {
		t.Error("a spec with other limits got a pool sandbox")
	}
	if got := waitPool(t, m, "busybox", 2); got[0] != refilled[0] || got[1] != refilled[1] {
		t.Errorf("pool changed by a cold create: %v, was %v", got, refilled)
	}

	// A restart with a pool of 1 takes one back and removes the other;
	// one with no pool removes it too.
	stop()
	m, stop = start(1)
	if got := waitPool(t, m, "busybox", 1); got[0] != refilled[0] {
		t.Errorf("after a restart the pool holds %v, want %s taken back", got, refilled[0])
	}
	waitGone(t, m, refilled[1], "the surplus pool sandbox survived a restart with a smaller pool")
	stop()
	m, stop = start(0)
	defer stop()
	waitGone(t, m, refilled[0], "a pool sandbox survived a restart with no pool")
	for _, info := range m.List(ctx, "", nil) {
		if info.Spec.Labels[LabelPool] != "" {
			t.Errorf("pool sandbox %s survived a restart with no pool", info.ID)
		}
	}
}

// newGvisor is what a test on real gVisor sandboxes needs: a directory,
// the executor built into it, and the backend on the pinned runsc.
func newGvisor(t *testing.T) (dir, exe string, gv *gvisor.Backend) {
	t.Helper()
	testenv.RequiresRoot(t)
	runsc := testenv.RequiresRunsc(t, gvisor.DefaultRunsc())
	dir = t.TempDir()
	exe = buildExecutor(t, dir)
	gv, err := gvisor.New(filepath.Join(dir, "runsc"), gvisor.WithBinary(runsc))
	if err != nil {
		t.Fatal(err)
	}
	return dir, exe, gv
}

func waitGone(t *testing.T, m *Manager, id, what string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := m.Get(context.Background(), "", id); errors.Is(err, errdefs.ErrNotFound) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, id)
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// A refill that fails (here: no image resolves) is logged and retried
// with backoff, not in a loop: in 2.5 s, the first try and one retry after
// 1 s (the next is 2 s later), and the pool says when it tries again.
func TestPoolRefillBackoff(t *testing.T) {
	m, images := newPoolManager(t, map[string]int{"busybox": 1}, nil)
	b := m.warm.take("busybox") // and gone: nothing for RunPool to take back
	if b == nil {
		t.Fatal("no sandbox to take")
	}
	delete(m.boxes, b.rec.ID)
	ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()
	m.RunPool(ctx)
	images.mu.Lock()
	calls := images.calls
	images.mu.Unlock()
	if calls < 1 || calls > 2 {
		t.Errorf("%d refills in 2.5 s, want 2 (a try, a retry after 1 s)", calls)
	}
	st := m.Pool()[0]
	if st.RetryAt.IsZero() || st.Ready != 0 || st.Making != 0 {
		t.Errorf("pool after failed refills: %+v", st)
	}
}
