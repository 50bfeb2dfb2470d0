package manager

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/internal/testenv"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/gvisor"
	"github.com/reinsdev/reins/sandbox/rootfs"
	"github.com/reinsdev/reins/sandbox/runc"
	"github.com/reinsdev/reins/sandbox/workspace"
)

func TestLifecycleGvisor(t *testing.T) {
	testenv.RequiresRoot(t)
	runsc := testenv.RequiresRunsc(t, gvisor.DefaultRunsc())
	testLifecycle(t, "gvisor", func(dir string) (sandbox.Backend, error) {
		return gvisor.New(filepath.Join(dir, "runsc"), gvisor.WithBinary(runsc))
	})
}

func TestLifecycleRunc(t *testing.T) {
	testenv.RequiresRoot(t)
	testenv.RequiresBinary(t, "runc", "runc")
	testLifecycle(t, "runc", func(dir string) (sandbox.Backend, error) { return runc.New(filepath.Join(dir, "runc")) })
}

// lifecycleManager is a manager with a workspace store under dir.
func lifecycleManager(t *testing.T, dir, exe, name string, b sandbox.Backend) *Manager {
	ws, err := workspace.Open(filepath.Join(dir, "workspaces"))
	if err != nil {
		t.Fatal(err)
	}
	return realManager(t, dir, exe, name, b, func(c *Config) { c.Workspaces = WorkspaceStore(ws) })
}

// testLifecycle: a suspend saves the files and leaves no disk, guest or
// loop device; a resume brings them back in the same sandbox; a snapshot
// makes new sandboxes; a fork makes independent ones; the bad inputs are
// refused in words; and a new manager on the same directory (a restart)
// keeps the suspended sandbox and the snapshot.
func testLifecycle(t *testing.T, name string, newBackend func(dir string) (sandbox.Backend, error)) {
	dir := t.TempDir()
	exe := buildExecutor(t, dir)
	backend, err := newBackend(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := lifecycleManager(t, dir, exe, name, backend)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var made []string
	defer func() {
		for _, id := range made {
			m.Delete(context.Background(), "", id)
		}
	}()
	create := func(spec sandbox.Spec) sandbox.Info {
		t.Helper()
		info, err := m.Create(ctx, "", spec, nil)
		if info.ID != "" {
			made = append(made, info.ID)
		}
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	sh := func(id, script string) string {
		t.Helper()
		c, err := m.Client(ctx, "", id)
		if err != nil {
			t.Fatal(err)
		}
		out, errOut, exit, err := c.Run(ctx, "sh", "-c", script)
		if err != nil || exit.GetExitCode() != 0 {
			t.Fatalf("%s: %q: %v, %v: %s", id, script, exit, err, errOut)
		}
		return string(out)
	}
	src := create(sandbox.Spec{Image: "busybox", Labels: map[string]string{"k": "v"}, Env: []string{"A=1"}})
	const write = `mkdir -p /workspace/d && echo hello > /workspace/d/f && chmod 640 /workspace/d/f &&
ln -s d/f /workspace/link && ln /workspace/d/f /workspace/hard && rm /bin/ls && echo unsynced > /workspace/late`
	sh(src.ID, write)
	const check = `stat -c '%a %h' /workspace/d/f; readlink /workspace/link; cat /workspace/hard /workspace/late; test -e /bin/ls && echo ls-back; echo $A`
	want := sh(src.ID, check)
	if want != "640 2\nd/f\nhello\nunsynced\n1\n" {
		t.Fatalf("before the suspend: %q", want)
	}

	info, saved, err := m.SuspendSandbox(ctx, "", src.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if info.State != sandbox.StateSuspended || info.Workspace == "" || saved.Digest != info.Workspace || saved.Files == 0 {
		t.Fatalf("suspended: %+v, saved %+v", info, saved)
	}
	l := rootfs.Layout{Dir: filepath.Join(m.cfg.Dir, src.ID)}
	if _, err := os.Stat(l.DiskImage()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a suspended sandbox's disk.img: %v, want gone", err)
	}
	if st, err := backend.Status(ctx, src.ID); err == nil && st.Running {
		t.Fatal("the backend still runs a suspended sandbox")
	}
	assertNoLoop(t, l.DiskImage())

	// Bad inputs on a suspended sandbox.
	if _, err := m.Fork(ctx, "", src.ID, 2); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "resume it first") {
		t.Errorf("fork of a suspended sandbox: %v", err)
	}
	if _, err := m.Snapshot(ctx, "", src.ID, "x"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("snapshot of a suspended sandbox: %v", err)
	}

	// What a crash in the middle of a restore leaves: a disk image that
	// is not the workspace. The resume starts over on a fresh disk.
	if err := os.WriteFile(l.DiskImage(), []byte("half a restore"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := m.Resume(ctx, "", src.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != src.ID || got.State != sandbox.StateRunning || got.Spec.Labels["k"] != "v" || got.Spec.Limits != src.Spec.Limits {
		t.Fatalf("resumed: %+v", got)
	}
	if after := sh(src.ID, check); after != want {
		t.Fatalf("after suspend and resume: %q, want %q", after, want)
	}
	if _, err := m.Resume(ctx, "", src.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "nothing to resume") {
		t.Errorf("resume of a running sandbox: %v", err)
	}

	// A snapshot, and a sandbox made from it.
	snap, err := m.Snapshot(ctx, "", src.ID, "base")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Snapshot(ctx, "", src.ID, "base"); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("a second snapshot named base: %v", err)
	}
	if _, err := m.Snapshot(ctx, "", src.ID, "../x"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("snapshot named ../x: %v", err)
	}
	from := create(sandbox.Spec{Image: "snapshot:base", Env: []string{"A=1"}})
	if from.Origin != "snapshot:base" || from.Workspace != snap.Digest {
		t.Errorf("made from snapshot:base: origin %q workspace %q, want %q", from.Origin, from.Workspace, snap.Digest)
	}
	if out := sh(from.ID, check); out != want {
		t.Errorf("a sandbox from snapshot:base: %q, want %q", out, want)
	}
	if _, err := m.Create(ctx, "other", sandbox.Spec{Image: "snapshot:base"}, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another tenant's create from snapshot:base: %v, want not found", err)
	}

	// Fork ×3: independent sandboxes, each with its own token.
	forks, err := m.Fork(ctx, "", src.ID, 3)
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]bool{}
	for _, f := range forks {
		made = append(made, f.ID)
		if f.Origin != "fork:"+src.ID || f.Spec.Labels["k"] != "v" {
			t.Errorf("fork %s: origin %q labels %v", f.ID, f.Origin, f.Spec.Labels)
		}
		if out := sh(f.ID, check); out != want {
			t.Errorf("fork %s: %q, want %q", f.ID, out, want)
		}
		b, _ := m.lookup("", f.ID)
		tokens[b.rec.Token] = true
	}
	sb, _ := m.lookup("", src.ID)
	tokens[sb.rec.Token] = true
	if len(tokens) != 4 {
		t.Errorf("the source and 3 forks have %d distinct executor tokens", len(tokens))
	}
	for _, f := range forks {
		// Saved beside the forks' first steps: each record names the save.
		fb, _ := m.lookup("", f.ID)
		rec, err := readRecord(fb.dir)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Workspace == "" || rec.Workspace != sb.rec.Workspace || rec.Base != rec.Workspace {
			t.Errorf("fork %s's record: workspace %q base %q, want the source's save %q", f.ID, rec.Workspace, rec.Base, sb.rec.Workspace)
		}
	}
	// A fork whose save fails (its caller gone) leaves no fork behind and
	// the source unlocked and running.
	before := len(m.List(ctx, "", nil))
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.Fork(gone, "", src.ID, 3); err == nil {
		t.Error("a fork with its caller gone succeeded")
	}
	if after := len(m.List(ctx, "", nil)); after != before {
		t.Errorf("a failed fork left %d sandboxes behind", after-before)
	}
	if out := sh(src.ID, "echo alive"); out != "alive\n" {
		t.Errorf("the source after a failed fork: %q", out)
	}
	sh(forks[0].ID, "echo mine > /workspace/only0")
	for _, id := range []string{forks[1].ID, forks[2].ID, src.ID} {
		if out := sh(id, "test -e /workspace/only0 && echo seen || echo absent"); out != "absent\n" {
			t.Errorf("%s sees fork 0's write: %q", id, out)
		}
	}

	// Snapshot rm is refused while a sandbox made from it lives (here
	// suspended), naming it.
	if _, _, err := m.SuspendSandbox(ctx, "", from.ID, ""); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteSnapshot(ctx, "", "base"); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "sandbox:"+from.ID) {
		t.Errorf("rm of a snapshot a suspended sandbox needs: %v", err)
	}

	// A restart: a new manager on the same directory.
	m.Close()
	m2 := lifecycleManager(t, dir, exe, name, backend)
	if err := m2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	m = m2
	list, err := m.ListSnapshots(ctx, "")
	if err != nil || !slices.ContainsFunc(list, func(s SnapshotInfo) bool { return s.Name == "base" && s.Digest == snap.Digest }) {
		t.Fatalf("snapshots after a restart: %+v, %v", list, err)
	}
	if _, err := m.Resume(ctx, "", from.ID); err != nil {
		t.Fatal(err)
	}
	if out := sh(from.ID, check); out != want {
		t.Errorf("resumed after a restart: %q, want %q", out, want)
	}
	// The forks were made of the same files (the source did not change
	// since the snapshot): they need it too.
	for _, id := range append([]string{from.ID}, forks[0].ID, forks[1].ID, forks[2].ID) {
		if err := m.Delete(ctx, "", id); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.DeleteSnapshot(ctx, "", "base"); err != nil {
		t.Errorf("rm of a snapshot nothing needs: %v", err)
	}
	if err := m.DeleteSnapshot(ctx, "", "base"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("rm of a removed snapshot: %v", err)
	}

	// The events tell the story, in order.
	evs, _, err := m.Events("", from.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	// The restart lost the earlier ones (in memory only): the resume is
	// the first this manager saw.
	if !slices.Equal(kinds, []string{EventResumed, EventStopped}) {
		t.Errorf("events of %s after the restart: %v", from.ID, kinds)
	}
}

// assertNoLoop fails if a loop device is backed by img.
func assertNoLoop(t *testing.T, img string) {
	t.Helper()
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(data)), img) {
			t.Errorf("%s is still backed by %s", f, img)
		}
	}
}
