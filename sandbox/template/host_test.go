package template_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor"
	"github.com/reinsdev/reins/executor/client"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/template"
)

// hostSandboxes is a template.Sandboxes whose sandboxes are directories
// on this host, each served by a real executor on a unix socket (no
// isolation: the tests' commands are the tests' own, and use paths
// relative to the sandbox's root). A snapshot is a copy of the
// directory; "snapshot:sha256:…" makes a sandbox from one.
type hostSandboxes struct {
	t   *testing.T
	dir string

	mu        sync.Mutex
	n         int
	live      map[string]*hostBox
	snapshots map[string]string // digest → directory
	saves     int
}

type hostBox struct {
	tenant string
	root   string
	srv    *executor.Server
	client *client.Client
	done   chan error
}

func newHostSandboxes(t *testing.T) *hostSandboxes {
	h := &hostSandboxes{t: t, dir: t.TempDir(), live: map[string]*hostBox{}, snapshots: map[string]string{}}
	t.Cleanup(func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		for id := range h.live {
			h.stopLocked(id)
		}
	})
	return h
}

func (h *hostSandboxes) Create(ctx context.Context, tenant string, spec sandbox.Spec, progress func(sandbox.Progress)) (sandbox.Info, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
	id := fmt.Sprintf("sb%d", h.n)
	root := filepath.Join(h.dir, id)
	if d, ok := strings.CutPrefix(spec.Image, template.SnapshotPrefix); ok {
		src, ok := h.snapshots[tenant+"/"+d]
		if !ok {
			return sandbox.Info{}, fmt.Errorf("snapshot %s not found: %w", d, errdefs.ErrNotFound)
		}
		if out, err := exec.Command("cp", "-a", src, root).CombinedOutput(); err != nil {
			return sandbox.Info{}, fmt.Errorf("cp: %v: %s", err, out)
		}
	} else if err := os.Mkdir(root, 0o755); err != nil {
		return sandbox.Info{}, err
	}
	srv, err := executor.New(executor.Config{Root: root, Workdir: "/", Token: "tok-" + id,
		BaseEnv: append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "LC_ALL=C"}, spec.Env...)})
	if err != nil {
		return sandbox.Info{}, err
	}
	sock := filepath.Join(h.dir, id+".sock")
	l, err := executor.Listen(sock)
	if err != nil {
		return sandbox.Info{}, err
	}
	b := &hostBox{tenant: tenant, root: root, srv: srv, done: make(chan error, 1)}
	go func() { b.done <- srv.Serve(l) }()
	if b.client, err = client.Dial(ctx, sock, "tok-"+id, client.WithCallTimeout(10*time.Second)); err != nil {
		return sandbox.Info{}, err
	}
	h.live[id] = b
	return sandbox.Info{ID: id, Tenant: tenant, Spec: spec, State: sandbox.StateRunning}, nil
}

func (h *hostSandboxes) box(tenant, id string) (*hostBox, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, ok := h.live[id]
	if !ok || b.tenant != tenant {
		return nil, fmt.Errorf("sandbox %s not found: %w", id, errdefs.ErrNotFound)
	}
	return b, nil
}

func (h *hostSandboxes) Executor(ctx context.Context, tenant, id string) (template.Executor, error) {
	b, err := h.box(tenant, id)
	if err != nil {
		return nil, err
	}
	return b.client, nil
}

func (h *hostSandboxes) SaveWorkspace(ctx context.Context, tenant, id string, progress func(sandbox.Progress)) (template.Saved, error) {
	b, err := h.box(tenant, id)
	if err != nil {
		return template.Saved{}, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.saves++
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d", id, h.saves))
	digest := "sha256:" + hex.EncodeToString(sum[:])
	dst := filepath.Join(h.dir, "snap-"+digest[7:19])
	if out, err := exec.Command("cp", "-a", b.root, dst).CombinedOutput(); err != nil {
		return template.Saved{}, fmt.Errorf("cp: %v: %s", err, out)
	}
	h.snapshots[tenant+"/"+digest] = dst
	return template.Saved{Digest: digest, Files: 1, Bytes: 1}, nil
}

func (h *hostSandboxes) Delete(ctx context.Context, tenant, id string) error {
	if _, err := h.box(tenant, id); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	root := h.live[id].root
	h.stopLocked(id)
	return os.RemoveAll(root)
}

func (h *hostSandboxes) stopLocked(id string) {
	b := h.live[id]
	b.client.Close()
	b.srv.Close()
	<-b.done
	delete(h.live, id)
}

// liveCount is how many sandboxes are still there.
func (h *hostSandboxes) liveCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.live)
}

// snapshotFile reads a file of snapshot digest of tenant.
func (h *hostSandboxes) snapshotFile(t *testing.T, tenant, digest, name string) string {
	t.Helper()
	h.mu.Lock()
	dir, ok := h.snapshots[tenant+"/"+digest]
	h.mu.Unlock()
	if !ok {
		t.Fatalf("no snapshot %s", digest)
	}
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// dropSnapshot removes a snapshot, as an operator's cleanup might.
func (h *hostSandboxes) dropSnapshot(tenant, digest string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.snapshots, tenant+"/"+digest)
}
