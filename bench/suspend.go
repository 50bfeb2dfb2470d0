package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/manager"
	"github.com/reinsdev/reins/sandbox/workspace"
)

// suspend: Manager.SuspendSandbox and Resume of a busybox gVisor sandbox
// whose workspace holds mib MiB (files of at most 64 MiB of random bytes,
// and 200 small files), beside GNU tar of the same tree in the same run:
// `tar -c` of the sandbox's upper layer into an archive, fsynced (what a
// suspend that saved a tarball would write), and `tar -x` of it into an
// empty directory on the same disk, synced (what its resume would
// unpack). A suspend is the executor's flush, the capture of the upper
// layer into the workspace store, the guest and its disk deleted; a
// resume is a disk from the pool, the restore, the overlay, the boot and
// the executor answering.
func (b *bench) suspend(mibs ...int) error {
	m, err := b.workspaceManager("suspend", nil)
	if err != nil {
		return err
	}
	defer m.Close()
	for _, mib := range mibs {
		if err := b.suspendOne(m, mib); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) suspendOne(m *manager.Manager, mib int) error {
	rec, err := m.Create(b.ctx, "", sandbox.Spec{Image: "busybox", Limits: sandbox.Limits{DiskBytes: 4 << 30}}, nil)
	if err != nil {
		return err
	}
	defer m.Delete(b.ctx, "", rec.ID)
	ex, err := m.Client(b.ctx, "", rec.ID)
	if err != nil {
		return err
	}
	big := min(mib, 64)
	fill := fmt.Sprintf(`cd /workspace && i=0; while [ $i -lt 200 ]; do echo "small $i" > s$i; i=$((i+1)); done; `+
		`n=0; left=%d; while [ $left -gt 0 ]; do c=%d; [ $left -lt $c ] && c=$left; head -c ${c}m /dev/urandom > big$n; left=$((left-c)); n=$((n+1)); done; sync`, mib, big)
	if _, stderr, exit, err := ex.Run(b.ctx, "sh", "-c", fill); err != nil || exit.GetExitCode() != 0 {
		return fmt.Errorf("filling the workspace: %v %s", err, stderr)
	}

	// tar of the same tree, while it is there (the guest has flushed it).
	upper := filepath.Join(b.dir, "suspendsb", rec.ID, "disk", "upper")
	archive := filepath.Join(b.dir, "suspend.tar")
	defer os.Remove(archive)
	tc, err := tarCreate(upper, archive, "")
	if err != nil {
		return err
	}
	tdst := filepath.Join(b.dir, "suspendsb", rec.ID, "disk", "tar-x")
	if err := os.Mkdir(tdst, 0o700); err != nil {
		return err
	}
	t0 := time.Now()
	if out, err := exec.Command("tar", "-x", "--xattrs", "--xattrs-include=*", "--numeric-owner", "-f", archive, "-C", tdst).CombinedOutput(); err != nil {
		return fmt.Errorf("tar -x: %v: %s", err, out)
	}
	if err := syncDir(tdst); err != nil {
		return err
	}
	tx := time.Since(t0)
	os.RemoveAll(tdst)

	t0 = time.Now()
	_, snap, err := m.SuspendSandbox(b.ctx, "", rec.ID, "")
	if err != nil {
		return err
	}
	sus := time.Since(t0)
	t0 = time.Now()
	if _, err := m.Resume(b.ctx, "", rec.ID); err != nil {
		return err
	}
	res := time.Since(t0)
	if ex, err = m.Client(b.ctx, "", rec.ID); err != nil {
		return err
	}
	if out, _, _, err := ex.Run(b.ctx, "sh", "-c", "cat /workspace/s199"); err != nil || string(out) != "small 199\n" {
		return fmt.Errorf("after the resume the workspace is not back: %q %v", out, err)
	}
	size := sandbox.FormatBytes(snap.Bytes)
	b.add(fmt.Sprintf("suspend, %s workspace (%d files)", size, snap.Files), ms(sus), ms(tc)+" (tar -c + fsync)", ratio(sus, tc), "")
	b.add(fmt.Sprintf("resume from suspend, %s workspace, to the executor answering", size), ms(res), ms(tx)+" (tar -x + sync)", ratio(res, tx), "")
	return nil
}

// syncDir flushes the filesystem that holds dir.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// workspaceManager is a gVisor manager of its own for a bench step (its
// sandboxes under b.dir/NAMEsb, its workspace store under b.dir/NAMEws),
// logging to log (nil: nowhere).
func (b *bench) workspaceManager(name string, log slog.Handler) (*manager.Manager, error) {
	ws, err := workspace.Open(filepath.Join(b.dir, name+"ws"))
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.DiscardHandler
	}
	return manager.New(manager.Config{
		Dir: filepath.Join(b.dir, name+"sb"), ExecutorPath: b.executor,
		Backends: map[string]sandbox.Backend{"gvisor": b.gv}, DefaultBackend: "gvisor",
		Images: manager.ImageStore(b.images), CheckInterval: time.Hour,
		Workspaces: manager.WorkspaceStore(ws), Logger: slog.New(log),
	})
}
