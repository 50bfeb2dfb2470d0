package manager

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/fake"
)

// noImages fails every resolve and counts them: a create refused by its
// quota must not get that far.
type noImages struct {
	mu    sync.Mutex
	calls int
}

func (n *noImages) Resolve(context.Context, string, func(sandbox.Progress)) (Image, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.calls++
	return Image{}, errors.New("no images in this test")
}

// newTenantManager returns a Manager over the fake backend with stopped
// sandboxes a1 (tenant acme), b1 (beta) and z1 (the admin's) recovered
// from their records, and running ones (in memory only) as listed.
func newTenantManager(t *testing.T, limits map[string]int, running map[string]string) (*Manager, *noImages) {
	t.Helper()
	dir := t.TempDir()
	exe := filepath.Join(dir, "reins-executor")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	images := &noImages{}
	m, err := New(Config{
		Dir: filepath.Join(dir, "sandboxes"), ExecutorPath: exe,
		Backends: map[string]sandbox.Backend{"fake": fake.New()}, DefaultBackend: "fake",
		Images: images, DiskPool: -1,
		MaxSandboxes: func(_ context.Context, tenant string) (int, error) { return limits[tenant], nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	for id, tenant := range map[string]string{"a1": "acme", "b1": "beta", "z1": ""} {
		d := filepath.Join(m.cfg.Dir, id)
		os.MkdirAll(d, 0o700)
		rec := Record{Info: sandbox.Info{ID: id, Tenant: tenant, State: sandbox.StateStopped, Reason: sandbox.ReasonExited,
			Spec: sandbox.Spec{Backend: "fake"}, CreatedAt: time.Now()}}
		if err := writeRecord(d, &rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	for id, tenant := range running {
		m.boxes[id] = &box{tenant: tenant, dir: filepath.Join(m.cfg.Dir, id),
			rec: Record{Info: sandbox.Info{ID: id, Tenant: tenant, State: sandbox.StateRunning, Spec: sandbox.Spec{Backend: "fake"}}}}
	}
	return m, images
}

func TestTenantScope(t *testing.T) {
	m, _ := newTenantManager(t, nil, nil)
	ctx := context.Background()
	ids := func(recs []sandbox.Info) string {
		var out []string
		for _, r := range recs {
			out = append(out, r.ID)
		}
		return strings.Join(out, ",")
	}
	if got := ids(m.List(ctx, "acme", nil)); got != "a1" {
		t.Errorf("List(acme) = %s, want a1", got)
	}
	if got := len(m.List(ctx, "", nil)); got != 3 {
		t.Errorf("List(admin) has %d sandboxes, want 3", got)
	}
	if rec, err := m.Get(ctx, "acme", "a1"); err != nil || rec.Tenant != "acme" {
		t.Errorf("Get(acme, a1) = %+v, %v", rec, err)
	}
	if _, err := m.Get(ctx, "", "a1"); err != nil {
		t.Errorf("Get(admin, a1): %v", err)
	}

	// Another tenant's sandbox is answered exactly as a missing one, by
	// every method.
	calls := map[string]func(id string) error{
		"Get":    func(id string) error { _, err := m.Get(ctx, "beta", id); return err },
		"Client": func(id string) error { _, err := m.Client(ctx, "beta", id); return err },
		"Delete": func(id string) error { return m.Delete(ctx, "beta", id) },
	}
	for name, call := range calls {
		other, missing := call("a1"), call("zz")
		if !errors.Is(other, errdefs.ErrNotFound) {
			t.Errorf("%s of another tenant's sandbox: %v, want not found", name, other)
			continue
		}
		if strings.ReplaceAll(other.Error(), "a1", "ID") != strings.ReplaceAll(missing.Error(), "zz", "ID") {
			t.Errorf("%s: another tenant's sandbox answers %q, a missing one %q", name, other, missing)
		}
		if err := call("z1"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%s of the admin's sandbox by a tenant: %v, want not found", name, err)
		}
	}
	if _, err := m.Get(ctx, "acme", "a1"); err != nil {
		t.Fatalf("a1 after beta's Delete: %v", err)
	}
	if err := m.Delete(ctx, "acme", "a1"); err != nil {
		t.Fatalf("Delete(acme, a1): %v", err)
	}
	if _, err := m.Get(ctx, "", "a1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a1 after its Delete: %v", err)
	}
}

func TestTenantQuota(t *testing.T) {
	m, images := newTenantManager(t, map[string]int{"acme": 2, "beta": 3},
		map[string]string{"r1": "acme", "r2": "acme", "r3": "beta", "r4": ""})
	ctx := context.Background()
	_, err := m.Create(ctx, "acme", sandbox.Spec{}, nil)
	if !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("Create over the quota: %v, want resource exhausted", err)
	}
	want := "tenant acme has 2 running sandboxes, its limit: remove some (reins sandbox rm) or raise the quota"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("quota error %q, want it to say %q", err, want)
	}
	if images.calls != 0 {
		t.Errorf("a refused create resolved its image")
	}
	if n := len(m.List(ctx, "acme", nil)); n != 3 {
		t.Errorf("acme has %d sandboxes after a refused create, want 3 (2 running, 1 stopped)", n)
	}
	// Under their quota, or without one, creates go on (and fail here
	// only for want of images).
	for _, tenant := range []string{"beta", "gamma", ""} {
		if _, err := m.Create(ctx, tenant, sandbox.Spec{}, nil); errors.Is(err, errdefs.ErrResourceExhausted) {
			t.Errorf("Create(%q) refused: %v", tenant, err)
		}
	}
	// Stopped sandboxes do not count.
	m.boxes["r1"].stopped.Store(true)
	if _, err := m.Create(ctx, "acme", sandbox.Spec{}, nil); errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("Create(acme) with one running sandbox of 2 allowed: %v", err)
	}
}

// TestTenantAdmitRace: concurrent admissions never pass the limit.
func TestTenantAdmitRace(t *testing.T) {
	m, _ := newTenantManager(t, nil, nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for i := range 20 {
		wg.Go(func() {
			b := &box{tenant: "acme", rec: Record{Info: sandbox.Info{ID: "n" + string(rune('a'+i)), Tenant: "acme"}}}
			if m.admit("acme", 5, b) == nil {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if admitted != 5 {
		t.Fatalf("%d of 20 concurrent creates admitted under a limit of 5", admitted)
	}
}
