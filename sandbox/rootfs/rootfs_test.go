package rootfs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/internal/testenv"
)

func TestDiskAndOverlay(t *testing.T) {
	testenv.RequiresRoot(t)
	testenv.RequiresBinary(t, "mkfs.ext4", "e2fsprogs")
	ctx := context.Background()
	l := Layout{Dir: filepath.Join(t.TempDir(), "sb")}
	t.Cleanup(func() { Remove(l) })

	if err := CreateDisk(ctx, l, 32<<20); err != nil {
		t.Fatal(err)
	}
	if err := MountDisk(l); err != nil {
		t.Fatal(err)
	}
	// Two layers: the upper one hides a file of the lower one with an
	// overlay whiteout (a 0:0 character device).
	lower, upper := t.TempDir(), t.TempDir()
	write(t, filepath.Join(lower, "etc/base"), "base")
	write(t, filepath.Join(lower, "etc/gone"), "gone")
	write(t, filepath.Join(upper, "etc/top"), "top")
	if err := unix.Mknod(filepath.Join(upper, "etc/gone"), unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	if err := MountOverlay(l, []string{lower, upper}); err != nil {
		t.Fatal(err)
	}
	root := l.Rootfs()
	for name, want := range map[string]string{"etc/base": "base", "etc/top": "top"} {
		got, err := os.ReadFile(filepath.Join(root, name))
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "etc/gone")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("whited-out file is visible: %v", err)
	}

	// A write lands in the sandbox's upper layer, never in the image.
	write(t, filepath.Join(root, "etc/base"), "changed")
	if got, _ := os.ReadFile(filepath.Join(lower, "etc/base")); string(got) != "base" {
		t.Errorf("image layer changed to %q", got)
	}
	if got, _ := os.ReadFile(filepath.Join(l.Upper(), "etc/base")); string(got) != "changed" {
		t.Errorf("upper layer has %q", got)
	}

	// The disk limit holds: a file larger than the disk fails with ENOSPC
	// and the disk stays usable once it is removed.
	big := filepath.Join(root, "big")
	err := os.WriteFile(big, bytes.Repeat([]byte("x"), 40<<20), 0o644)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("writing 40 MiB to a 32 MiB disk: %v, want ENOSPC", err)
	}
	if err := os.Remove(big); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(root, "after"), "ok")
	used, total, err := Usage(l)
	if err != nil || total == 0 || used > total {
		t.Errorf("Usage = %d, %d, %v", used, total, err)
	}

	// Mounting again is a no-op; unmounting keeps the disk, and a second
	// mount shows the same files (what a replacement sandbox reuses).
	if err := MountDisk(l); err != nil {
		t.Fatal(err)
	}
	if err := Unmount(l); err != nil {
		t.Fatal(err)
	}
	if mounted(l.Rootfs()) || mounted(l.Disk()) {
		t.Fatal("still mounted after Unmount")
	}
	if err := MountDisk(l); err != nil {
		t.Fatal(err)
	}
	if err := MountOverlay(l, []string{lower, upper}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "after")); string(got) != "ok" {
		t.Errorf("after remount: %q", got)
	}
	if err := Remove(l); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox dir left behind: %v", err)
	}
}

func TestCreateDiskRefusesTinySize(t *testing.T) {
	l := Layout{Dir: t.TempDir()}
	if err := CreateDisk(context.Background(), l, 1<<20); err == nil {
		t.Fatal("a 1 MiB disk was accepted")
	}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A disk whose filesystem an unmount had to detach (something held a file
// of it open) is not mounted a second time while that filesystem lives:
// the second would read blocks the first had not written yet. MountDisk
// waits for it to be let go, then sees everything written through it; if
// it is never let go, MountDisk says so.
func TestRemountWaitsForTheDetachedFilesystem(t *testing.T) {
	testenv.RequiresRoot(t)
	testenv.RequiresBinary(t, "mkfs.ext4", "e2fsprogs")
	busy, detach := busyWait, detachWait
	busyWait, detachWait = 100*time.Millisecond, 10*time.Second
	t.Cleanup(func() { busyWait, detachWait = busy, detach })
	l := mountedDisk(t)
	want := bytes.Repeat([]byte("written before the unmount\n"), 4000)
	holder, err := os.Create(filepath.Join(l.Upper(), "kept"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Write(want); err != nil {
		t.Fatal(err)
	}
	// The open file keeps the filesystem busy: Unmount detaches it.
	if err := Unmount(l); err != nil {
		holder.Close()
		t.Fatal(err)
	}
	if mounted(l.Disk()) {
		t.Fatal("the disk is still mounted after Unmount")
	}
	released := make(chan struct{})
	go func() {
		time.Sleep(500 * time.Millisecond)
		holder.Close()
		close(released)
	}()
	t0 := time.Now()
	if err := MountDisk(l); err != nil {
		t.Fatal(err)
	}
	<-released
	if waited := time.Since(t0); waited < 400*time.Millisecond {
		t.Errorf("MountDisk mounted the disk again after %v, while its detached filesystem was alive", waited)
	}
	got, err := os.ReadFile(filepath.Join(l.Upper(), "kept"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after the remount the file holds %d bytes (%v), want the %d written", len(got), err, len(want))
	}

	// Held for good: a clear error, and nothing mounted.
	holder, err = os.Open(filepath.Join(l.Upper(), "kept"))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if err := Unmount(l); err != nil {
		t.Fatal(err)
	}
	detachWait = 300 * time.Millisecond
	err = MountDisk(l)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "still held by its previous filesystem") {
		t.Fatalf("MountDisk of a disk still held = %v, want unavailable, still held", err)
	}
	if mounted(l.Disk()) {
		t.Error("MountDisk mounted a disk still held by its detached filesystem")
	}
}

// The disk holds what the sandbox wrote, set-ID programs and device nodes
// included: the host mounts it nosuid and nodev, so it never runs or
// opens them, while the overlay above it (its own mount) keeps set-ID
// bits working inside the sandbox.
func TestDiskIsNosuidNodev(t *testing.T) {
	testenv.RequiresRoot(t)
	testenv.RequiresBinary(t, "mkfs.ext4", "e2fsprogs")
	l := mountedDisk(t)
	var st unix.Statfs_t
	if err := unix.Statfs(l.Disk(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Flags&unix.ST_NOSUID == 0 || st.Flags&unix.ST_NODEV == 0 {
		t.Fatalf("the disk is mounted with flags %#x, want nosuid and nodev", st.Flags)
	}
	// A device node on the disk cannot be opened from the host.
	if err := unix.Mknod(filepath.Join(l.Upper(), "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	if f, err := os.Open(filepath.Join(l.Upper(), "null")); err == nil {
		f.Close()
		t.Fatal("a device node on the disk opened from the host")
	}
	lower := t.TempDir()
	write(t, filepath.Join(lower, "etc/base"), "base")
	if err := MountOverlay(l, []string{lower}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Statfs(l.Rootfs(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Flags&unix.ST_NOSUID != 0 {
		t.Errorf("the overlay is nosuid (flags %#x): set-ID programs would not work in the sandbox", st.Flags)
	}
}

// mountedDisk makes and mounts a 32 MiB disk, removed when the test ends.
func mountedDisk(t *testing.T) Layout {
	t.Helper()
	l := Layout{Dir: filepath.Join(t.TempDir(), "sb")}
	t.Cleanup(func() { Remove(l) })
	if err := CreateDisk(context.Background(), l, 32<<20); err != nil {
		t.Fatal(err)
	}
	if err := MountDisk(l); err != nil {
		t.Fatal(err)
	}
	return l
}
