package manager

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor/client"
	"github.com/reinsdev/reins/sandbox"
)

// pausedBox creates a busybox gVisor sandbox of m with limits and returns
// its id, its executor's client and its directory.
func pausedBox(t *testing.T, m *Manager, limits sandbox.Limits) (string, *client.Client, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	info, err := m.Create(ctx, "", sandbox.Spec{Image: "busybox", Limits: limits}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Delete(context.Background(), "", info.ID) })
	c, err := m.Client(ctx, "", info.ID)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := m.lookup("", info.ID)
	return info.ID, c, b.dir
}

func shOK(t *testing.T, c *client.Client, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, errOut, exit, err := c.Run(ctx, "sh", "-c", script)
	if err != nil || exit.GetExitCode() != 0 {
		t.Fatalf("sh -c %q: %v %v: %s%s", script, err, exit, out, errOut)
	}
	return string(out)
}

// A pause whose image does not fit on the host's disk leaves the sandbox
// running, its executor reached again, and says why without a host path.
func TestHostilePauseDiskFull(t *testing.T) {
	dir := t.TempDir()
	sbDir := filepath.Join(dir, "sandboxes")
	if err := os.MkdirAll(sbDir, 0o700); err != nil {
		t.Fatal(err)
	}
	// Room for the sandbox's small disk (sparse), not for 64 MiB of memory.
	if err := unix.Mount("tmpfs", sbDir, "tmpfs", 0, "size=48m"); err != nil {
		t.Fatalf("mount a small tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(sbDir, unix.MNT_DETACH) })
	m := gvisorManager(t, dir)
	id, c, _ := pausedBox(t, m, sandbox.Limits{DiskBytes: 24 << 20, MemoryBytes: 256 << 20})
	shOK(t, c, "head -c 64m /dev/urandom > /tmp/fill && echo kept > /tmp/mark")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, _, _, err := m.Pause(ctx, "", id, false)
	if !errors.Is(err, errdefs.ErrNoSpace) || !strings.Contains(err.Error(), "keeps running") {
		t.Fatalf("Pause with the host's disk full: %v, want no space, and that it keeps running", err)
	}
	if strings.Contains(err.Error(), dir) {
		t.Errorf("the error names a host path: %v", err)
	}
	if info, err := m.Get(ctx, "", id); err != nil || info.State != sandbox.StateRunning {
		t.Fatalf("after the failed pause: %v, %v; want running", info.State, err)
	}
	c2, err := m.Client(ctx, "", id)
	if err != nil {
		t.Fatal(err)
	}
	if got := shOK(t, c2, "cat /tmp/mark"); got != "kept\n" {
		t.Errorf("the sandbox's memory after the failed pause: %q", got)
	}
	b, _ := m.lookup("", id)
	if _, err := os.Stat(checkpointDir(b.dir)); !os.IsNotExist(err) {
		t.Errorf("the half-written image is still there (%v)", err)
	}
}

// The memory image sits where the sandbox cannot reach it: names the
// sandbox plants in its control directory (as if it were the image's)
// lead nowhere, and nothing of the image shows inside after the resume.
func TestHostilePauseImageUnreachable(t *testing.T) {
	dir := t.TempDir()
	m := gvisorManager(t, dir)
	id, c, sdir := pausedBox(t, m, sandbox.Limits{})
	shOK(t, c, "ln -s / /.reins/run/checkpoint; ln -s /workspace /.reins/run/checkpoint.json; echo secret-in-memory > /tmp/m")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, _, _, err := m.Pause(ctx, "", id, false); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(checkpointDir(sdir))
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the image directory: %v, %v; want a 0700 directory", fi, err)
	}
	if _, err := os.Lstat(filepath.Join(checkpointDir(sdir), "checkpoint.img")); err != nil {
		t.Errorf("no image in the host's directory: %v", err)
	}
	if _, err := m.Resume(ctx, "", id); err != nil {
		t.Fatal(err)
	}
	c2, err := m.Client(ctx, "", id)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing of the image is visible inside: not in the control
	// directory, not anywhere on its filesystems.
	if out := shOK(t, c2, "find / -name pages.img -o -name checkpoint.img -o -name pages_meta.img 2>/dev/null; true"); out != "" {
		t.Errorf("the sandbox sees its memory image: %q", out)
	}
	if got := shOK(t, c2, "cat /tmp/m; ls /workspace"); got != "secret-in-memory\n" {
		t.Errorf("after the resume: %q (the host wrote through a planted name?)", got)
	}
}

// A sandbox that fills its memory to its limit and is paused leaves an
// image about the size of its limit, not more: a paused sandbox's cost on
// the host's disk is bounded by its memory limit.
func TestHostilePauseMemoryBounded(t *testing.T) {
	dir := t.TempDir()
	m := gvisorManager(t, dir)
	const limit = 128 << 20
	id, c, _ := pausedBox(t, m, sandbox.Limits{MemoryBytes: limit})
	// Most of what the limit lets it keep beside gVisor's own needs (more
	// and the limit kills the whole sandbox).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	shOK(t, c, "head -c 80m /dev/urandom > /tmp/fill")
	_, _, n, err := m.Pause(ctx, "", id, false)
	if err != nil {
		t.Fatalf("Pause: %v", err)
	}
	t.Logf("image of a sandbox with a %s limit: %s", sandbox.FormatBytes(limit), sandbox.FormatBytes(n))
	if n > limit+16<<20 {
		t.Errorf("the image is %s, more than the sandbox's memory limit %s (+16 MiB)", sandbox.FormatBytes(n), sandbox.FormatBytes(limit))
	}
	if n < 64<<20 {
		t.Errorf("the image is %s: the sandbox's memory was not saved", sandbox.FormatBytes(n))
	}
}
