package rootfs

import (
	"bytes"
	"os"
	"syscall"
	"testing"
)

// A sparse disk is copied with its data where it was and its holes kept.
func TestCopyDiskKeepsSparse(t *testing.T) {
	from, to := Layout{Dir: t.TempDir()}, Layout{Dir: t.TempDir()}
	f, err := os.Create(from.DiskImage())
	if err != nil {
		t.Fatal(err)
	}
	const size = 256 << 20
	f.Truncate(size)
	f.WriteAt(bytes.Repeat([]byte("a"), 1<<20), 0)
	f.WriteAt(bytes.Repeat([]byte("z"), 4096), 100<<20)
	f.WriteAt([]byte("end"), size-3)
	f.Close()
	if err := CopyDisk(from, to); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(from.DiskImage())
	b, err := os.ReadFile(to.DiskImage())
	if err != nil || !bytes.Equal(a, b) {
		t.Fatalf("the copy differs (%v)", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(to.DiskImage(), &st); err != nil {
		t.Fatal(err)
	}
	if used := st.Blocks * 512; used > 8<<20 {
		t.Errorf("the copy uses %d bytes of its %d: not sparse", used, size)
	}
	if err := CopyDisk(from, to); err == nil {
		t.Error("a second copy over an existing disk was not refused")
	}
}
