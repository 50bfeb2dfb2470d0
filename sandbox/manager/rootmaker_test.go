package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reinsdev/reins/image"
	"github.com/reinsdev/reins/internal/testenv"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/rootfs"
	"github.com/reinsdev/reins/sandbox/runc"
)

// selfRooted makes its sandboxes' root filesystems itself, as a pod or VM
// backend does on its own node: a plain directory holding a static busybox
// and the executor, which runc runs. It records the bundle it was given.
type selfRooted struct {
	*runc.Backend
	got chan sandbox.Bundle
}

func (selfRooted) MakesRoot() {}

var _ sandbox.RootMaker = selfRooted{}

func (s selfRooted) Start(ctx context.Context, b sandbox.Bundle) (sandbox.Endpoint, error) {
	s.got <- b
	root := filepath.Join(b.Dir, "self-root")
	run := filepath.Join(b.Dir, "self-run")
	for _, d := range []string{root + "/bin", root + "/.reins/bin", root + "/tmp", run} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return sandbox.Endpoint{}, err
		}
	}
	if err := copyFile("/bin/busybox", root+"/bin/busybox"); err != nil {
		return sandbox.Endpoint{}, err
	}
	for _, tool := range []string{"sh", "cat", "echo", "mkdir"} {
		os.Symlink("busybox", root+"/bin/"+tool)
	}
	if err := copyFile(b.Executor, root+b.Args[0]); err != nil {
		return sandbox.Endpoint{}, err
	}
	b.Rootfs = root
	b.Mounts = []sandbox.Mount{{Source: run, Target: RunTarget}}
	return s.Backend.Start(ctx, b)
}

// realManager is a Manager in dir over one real backend, with the real
// image store (busybox is built in) and the executor exe; it is closed
// when the test ends.
func realManager(t *testing.T, dir, exe, name string, b sandbox.Backend, opts ...func(*Config)) *Manager {
	t.Helper()
	images, err := image.NewStore(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Dir: filepath.Join(dir, "sandboxes"), ExecutorPath: exe,
		Backends: map[string]sandbox.Backend{name: b}, DefaultBackend: name,
		Images: ImageStore(images), DiskPool: -1, CheckInterval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, o := range opts {
		o(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// buildExecutor builds the static executor into dir.
func buildExecutor(t *testing.T, dir string) string {
	t.Helper()
	exe := filepath.Join(dir, "reins-executor")
	build := exec.Command("go", "build", "-o", exe, "github.com/reinsdev/reins/cmd/reins-executor")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the executor: %v\n%s", err, out)
	}
	return exe
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o755)
}

// A backend that makes its own root filesystem gets the image and the
// executor instead of a mounted root: the manager makes no disk, no
// overlay and no control directory for it, and the sandbox works.
func TestRootMakerSkipsLocalRoot(t *testing.T) {
	testenv.RequiresRoot(t)
	testenv.RequiresBinary(t, "runc", "runc")
	busybox := testenv.RequiresBinary(t, "busybox", "busybox-static")
	if !strings.HasPrefix(busybox, "/bin/") && !strings.HasPrefix(busybox, "/usr/bin/") {
		t.Fatalf("busybox at %s", busybox)
	}
	dir := t.TempDir()
	exe := buildExecutor(t, dir)
	rb, err := runc.New(filepath.Join(dir, "runc"))
	if err != nil {
		t.Fatal(err)
	}
	backend := selfRooted{Backend: rb, got: make(chan sandbox.Bundle, 1)}
	m := realManager(t, dir, exe, "self", backend)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	info, err := m.Create(ctx, "", sandbox.Spec{Image: "busybox", Backend: "self"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(context.Background(), "", info.ID)

	b := <-backend.got
	if b.Rootfs != "" || len(b.Mounts) != 0 {
		t.Errorf("a RootMaker was given a host root: rootfs %q, mounts %v", b.Rootfs, b.Mounts)
	}
	if b.Image.Ref != "busybox" || b.Image.Digest == "" || b.Image.Digest != info.ImageDigest {
		t.Errorf("bundle image = %+v, want busybox at %s", b.Image, info.ImageDigest)
	}
	if b.Executor != exe {
		t.Errorf("bundle executor = %q, want %q", b.Executor, exe)
	}
	l := rootfs.Layout{Dir: filepath.Join(m.cfg.Dir, info.ID)}
	for _, p := range []string{l.DiskImage(), l.Disk(), l.Rootfs(), l.Run()} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the manager made %s for a RootMaker's sandbox (stat: %v)", p, err)
		}
	}
	// (The backend's own root, under b.Dir, is its business.)
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		for _, p := range []string{l.Disk(), l.Rootfs(), l.Run()} {
			if f := strings.Fields(line); len(f) > 4 && f[4] == p {
				t.Errorf("the manager mounted %s for a RootMaker's sandbox", p)
			}
		}
	}

	c, err := m.Client(ctx, "", info.ID)
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, exit, err := c.Run(ctx, "sh", "-c", "echo made-by-the-backend > f && cat f && pwd")
	if err != nil || exit.GetExitCode() != 0 {
		t.Fatalf("exec: %v, exit %v, stderr %s", err, exit, errOut)
	}
	if got := string(out); got != "made-by-the-backend\n/workspace\n" {
		t.Errorf("exec printed %q", got)
	}
	if err := m.Delete(ctx, "", info.ID); err != nil {
		t.Fatal(fmt.Errorf("delete: %w", err))
	}
}
