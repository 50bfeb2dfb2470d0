package rootfs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

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
