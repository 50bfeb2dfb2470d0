package gvisor_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/gvisor"
	"github.com/reinsdev/reins/sandbox/sandboxtest"
)

// counter counts in memory (a shell variable), writes each count to
// /tmp/n (gVisor's tmpfs: memory too) and appends it to /ctl/count.log
// through a descriptor it holds open; a TCP listener on the sandbox's
// loopback answers with the current count, and a prober writes what it
// answers to /ctl/probe.
const counter = `exec 3>>/ctl/count.log
i=0
(while :; do i=$((i+1)); echo $i > /tmp/n; echo $i >&3; sleep 0.05; done) &
nc -ll -p 8080 -e /bin/cat /tmp/n &
while :; do nc 127.0.0.1 8080 > /ctl/probe.tmp 2>/dev/null && [ -s /ctl/probe.tmp ] && mv /ctl/probe.tmp /ctl/probe; sleep 0.05; done`

type ckptEnv struct {
	t      *testing.T
	b      *gvisor.Backend
	rootfs string
}

func newCkptEnv(t *testing.T) *ckptEnv {
	e := &ckptEnv{t: t, b: newBackend(t, t.TempDir()), rootfs: t.TempDir()}
	sandboxtest.BusyboxRootfs(t, e.rootfs)
	return e
}

// bundle is a bundle of the counter with its own control dir (ctl).
func (e *ckptEnv) bundle(ctl string) sandbox.Bundle {
	return sandbox.Bundle{
		ID: sandboxtest.NewID("ckpt"), Dir: e.t.TempDir(), Rootfs: e.rootfs,
		Mounts: []sandbox.Mount{{Source: ctl, Target: "/ctl"}},
		Args:   []string{"sh", "-c", counter}, Env: []string{"PATH=/bin"}, Cwd: "/", Hostname: "sbx",
	}
}

func (e *ckptEnv) cleanup(id string) {
	e.t.Cleanup(func() {
		if err := e.b.Delete(context.Background(), id); err != nil {
			e.t.Errorf("cleanup: Delete %s: %v", id, err)
		}
	})
}

func (e *ckptEnv) start(b sandbox.Bundle) {
	e.t.Helper()
	e.cleanup(b.ID)
	if _, err := e.b.Start(ctxT(e.t), b); err != nil {
		e.t.Fatalf("Start: %v", err)
	}
}

func (e *ckptEnv) restore(b sandbox.Bundle, img string) {
	e.t.Helper()
	e.cleanup(b.ID)
	if _, err := e.b.Restore(ctxT(e.t), b, img); err != nil {
		e.t.Fatalf("Restore: %v", err)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// counts reads count.log: the counts, which must be 1, 2, 3, … with no
// gap and no restart.
func counts(t *testing.T, ctl string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(ctl, "count.log"))
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(data))
	for i, l := range lines {
		if l != strconv.Itoa(i+1) {
			t.Fatalf("count.log line %d is %q, want %d: the count restarted or its file offset was lost (%s)", i+1, l, i+1, strings.Join(lines, " "))
		}
	}
	return len(lines)
}

// waitOver waits until get gives more than n, and returns it; what names
// it in the failure.
func waitOver(t *testing.T, what string, n int, get func() int) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if v := get(); v > n {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s stayed at or under %d", what, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitCounts waits until count.log has more than n counts.
func waitCounts(t *testing.T, ctl string, n int) int {
	t.Helper()
	return waitOver(t, "count.log's counts", n, func() int { return counts(t, ctl) })
}

// waitProbe waits for the prober to record an answer of the listener
// that is more than n.
func waitProbe(t *testing.T, ctl string, n int) int {
	t.Helper()
	return waitOver(t, "the answer of the listener in the sandbox", n, func() int {
		b, _ := os.ReadFile(filepath.Join(ctl, "probe"))
		v, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return -1
		}
		return v
	})
}

// A checkpoint ends the sandbox with nothing running after it; a restore
// goes on counting from where it was (memory), appending where it was
// (the open file's offset), and its listener answers.
func TestCheckpointRestore(t *testing.T) {
	e := newCkptEnv(t)
	ctl := t.TempDir()
	b := e.bundle(ctl)
	e.start(b)
	waitProbe(t, ctl, 3)
	img := filepath.Join(t.TempDir(), "checkpoint")
	if err := e.b.Checkpoint(ctxT(t), b.ID, img); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if _, err := e.b.Status(ctxT(t), b.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Status after the checkpoint: %v, want not found (the sandbox is ended)", err)
	}
	saved := counts(t, ctl)
	time.Sleep(300 * time.Millisecond)
	if n := counts(t, ctl); n != saved {
		t.Fatalf("count.log grew from %d to %d after the checkpoint: something ran past the image", saved, n)
	}
	os.Remove(filepath.Join(ctl, "probe"))

	e.restore(b, img)
	waitCounts(t, ctl, saved+3)
	waitProbe(t, ctl, saved)
	if st, err := e.b.Status(ctxT(t), b.ID); err != nil || !st.Running {
		t.Fatalf("Status after the restore: %+v, %v", st, err)
	}
}

// One image restores into several new sandboxes (a fork), each on its own
// copy of the files, each going on from the saved count.
func TestRestoreFork(t *testing.T) {
	e := newCkptEnv(t)
	ctl := t.TempDir()
	b := e.bundle(ctl)
	e.start(b)
	waitCounts(t, ctl, 3)
	img := filepath.Join(t.TempDir(), "checkpoint")
	if err := e.b.Checkpoint(ctxT(t), b.ID, img); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	saved := counts(t, ctl)
	for i := range 2 {
		ctl2 := t.TempDir()
		if out, err := exec.Command("cp", "-a", ctl+"/.", ctl2).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v: %s", err, out)
		}
		fork := e.bundle(ctl2)
		e.restore(fork, img)
		waitCounts(t, ctl2, saved+3)
		t.Logf("fork %d: counting on from %d", i, saved)
	}
	if n := counts(t, ctl); n != saved {
		t.Errorf("the source's count.log changed (%d → %d): a fork wrote to the source's files", saved, n)
	}
}

// A checkpoint that cannot be written (the host's disk is full) leaves
// the sandbox running as it was, and says so.
func TestCheckpointDiskFull(t *testing.T) {
	e := newCkptEnv(t)
	ctl := t.TempDir()
	b := e.bundle(ctl)
	e.start(b)
	n := waitCounts(t, ctl, 3)
	full := t.TempDir()
	if err := unix.Mount("tmpfs", full, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatalf("mount a small tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(full, unix.MNT_DETACH) })
	err := e.b.Checkpoint(ctxT(t), b.ID, filepath.Join(full, "checkpoint"))
	if !errors.Is(err, errdefs.ErrNoSpace) || !strings.Contains(err.Error(), "keeps running") {
		t.Fatalf("Checkpoint onto a full disk: %v, want no space and that it keeps running", err)
	}
	if strings.Contains(err.Error(), full) {
		t.Errorf("the error names a host path: %v", err)
	}
	if st, err := e.b.Status(ctxT(t), b.ID); err != nil || !st.Running {
		t.Fatalf("Status after the failed checkpoint: %+v, %v", st, err)
	}
	waitCounts(t, ctl, n+3)
}
