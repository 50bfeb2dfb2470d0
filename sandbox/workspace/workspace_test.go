package workspace

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/errdefs"
)

// exactTree fills upper with one of everything a snapshot must keep.
func exactTree(t *testing.T, upper string) {
	t.Helper()
	j := func(p string) string { return filepath.Join(upper, p) }
	writeFile(t, j("empty"), nil, 0o644)
	writeFile(t, j("src/small.txt"), []byte("hello\n"), 0o640)
	writeFile(t, j("src/grid"), pattern("grid", ChunkSize), 0o600)
	writeFile(t, j("src/big.bin"), pattern("big", 3*ChunkSize+12345), 0o755)
	writeFile(t, j("bin/suid"), []byte("#!/bin/sh\n"), 0o755)
	must(t, unix.Chmod(j("bin/suid"), 0o4755))
	writeFile(t, j("bin/sgid"), []byte("x"), 0o755)
	must(t, unix.Chmod(j("bin/sgid"), 0o2711))
	must(t, os.MkdirAll(j("tmp"), 0o755))
	must(t, unix.Chmod(j("tmp"), 0o1777))
	must(t, os.MkdirAll(j("shared"), 0o755))
	must(t, unix.Chmod(j("shared"), 0o2775))
	must(t, os.MkdirAll(j("empty-dir/deeper/still"), 0o700))
	must(t, os.Chown(j("src/small.txt"), 1234, 5678))
	must(t, os.Lchown(j("src"), 1000, 1000))
	// Symbolic links, kept verbatim: relative, absolute, dangling, to a
	// directory, owned by someone.
	must(t, os.Symlink("small.txt", j("src/rel")))
	must(t, os.Symlink("/etc/passwd", j("src/abs")))
	must(t, os.Symlink("../nowhere/at/all", j("dangling")))
	must(t, os.Symlink("src", j("src-link")))
	must(t, os.Lchown(j("src-link"), 42, 43))
	// Hard links: three names of one file, across directories.
	writeFile(t, j("links/a"), []byte("one inode"), 0o644)
	must(t, os.Link(j("links/a"), j("links/b")))
	must(t, os.Link(j("links/a"), j("src/c")))
	// Extended attributes: user, trusted, security; on a file, a
	// directory and a symbolic link (trusted only: user.* is refused on
	// links).
	must(t, unix.Setxattr(j("src/small.txt"), "user.note", []byte("kept"), 0))
	must(t, unix.Setxattr(j("src/small.txt"), "trusted.thing", []byte{0, 1, 2, 255}, 0))
	must(t, unix.Setxattr(j("src/small.txt"), "security.label", []byte("s0"), 0))
	must(t, unix.Setxattr(j("src"), "user.dir", []byte("d"), 0))
	must(t, unix.Lsetxattr(j("src/rel"), "trusted.link", []byte("l"), 0))
	// Overlayfs: a whiteout (the sandbox deleted an image file) and opaque
	// directories (it replaced an image directory), both spellings.
	must(t, os.MkdirAll(j("etc"), 0o755))
	must(t, unix.Mknod(j("etc/deleted"), unix.S_IFCHR, 0))
	must(t, os.MkdirAll(j("opaque"), 0o755))
	must(t, unix.Setxattr(j("opaque"), "trusted.overlay.opaque", []byte("y"), 0))
	writeFile(t, j("opaque/new"), []byte("new"), 0o644)
	must(t, os.MkdirAll(j("uopaque"), 0o755))
	must(t, unix.Setxattr(j("uopaque"), "user.overlay.opaque", []byte("y"), 0))
	// A sparse file: 64 MiB with data at 0, in the middle (across a grid
	// line) and at the end.
	f, err := os.Create(j("sparse.img"))
	must(t, err)
	_, err = f.WriteAt([]byte("start"), 0)
	must(t, err)
	_, err = f.WriteAt(pattern("mid", 8192), 32*ChunkSize-4096)
	must(t, err)
	_, err = f.WriteAt([]byte("end"), 64*ChunkSize-3)
	must(t, err)
	must(t, f.Close())
	// Names: newlines, invalid UTF-8, spaces, a leading dash, the longest.
	writeFile(t, j("names/line\nbreak"), []byte("nl"), 0o644)
	writeFile(t, j("names/bad\xff\xfeutf8"), []byte("bytes"), 0o644)
	writeFile(t, j("names/ -dash and space"), []byte("s"), 0o644)
	long := make([]byte, 255)
	for i := range long {
		long[i] = 'n'
	}
	writeFile(t, j("names/"+string(long)), []byte("long"), 0o644)
	// Times, last (creating entries changes their directories'), with
	// nanoseconds, in the past.
	old := time.Date(2001, 2, 3, 4, 5, 6, 789012345, time.UTC)
	filepath.Walk(upper, func(p string, _ os.FileInfo, _ error) error {
		ts := []unix.Timespec{unix.NsecToTimespec(old.UnixNano() + 1000), unix.NsecToTimespec(old.UnixNano())}
		must(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW))
		old = old.Add(time.Hour + 17*time.Nanosecond)
		return nil
	})
}

func TestRoundTripIsExact(t *testing.T) {
	ctx := context.Background()
	src := disk(t, 256<<20)
	exactTree(t, src)
	s := store(t, "")
	var calls int
	snap, err := s.Capture(ctx, src, CaptureOptions{Progress: func(Progress) { calls++ }})
	must(t, err)
	// Every byte is new to an empty store (no two files share content).
	if snap.Skipped != 0 || snap.Files < 20 || snap.Bytes < 4*ChunkSize || snap.StoredBytes != snap.Bytes {
		t.Errorf("snapshot %+v", snap)
	}
	if calls == 0 {
		t.Error("Progress was never called")
	}
	st, err := s.Stat(ctx, snap.Digest)
	must(t, err)
	if want := (Snapshot{snap.Digest, snap.Files, snap.Bytes, 0, snap.Skipped}); st != want {
		t.Errorf("Stat = %+v, Capture said %+v", st, snap)
	}
	dst := disk(t, 256<<20)
	var last Progress
	must(t, s.Restore(ctx, snap.Digest, dst, func(p Progress) { last = p }))
	sameTree(t, src, dst)
	if last.Bytes != snap.Bytes || last.TotalBytes != snap.Bytes || last.Files != snap.Files {
		t.Errorf("last restore progress %+v, snapshot %+v", last, snap)
	}
	// Sparse stays sparse: the 64 MiB file takes a few blocks.
	var fst unix.Stat_t
	must(t, unix.Stat(filepath.Join(dst, "sparse.img"), &fst))
	if fst.Blocks*512 > 4*ChunkSize {
		t.Errorf("restored sparse file takes %d bytes", fst.Blocks*512)
	}
	// The same tree again: nothing new is stored, and the manifest (same
	// inodes, same everything) is the same snapshot.
	again, err := s.Capture(ctx, src, CaptureOptions{})
	must(t, err)
	if again.StoredBytes != 0 || again.Digest != snap.Digest {
		t.Errorf("second capture %+v, first %+v", again, snap)
	}
}

func TestRestoreNeedsAnEmptyDirectory(t *testing.T) {
	ctx := context.Background()
	src := disk(t, 32<<20)
	writeFile(t, filepath.Join(src, "a"), []byte("a"), 0o644)
	s := store(t, "")
	snap, err := s.Capture(ctx, src, CaptureOptions{})
	must(t, err)
	err = s.Restore(ctx, snap.Digest, src, nil)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("restore into a full directory: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(src, "a")); string(b) != "a" {
		t.Error("a refused restore touched the directory")
	}
	if _, err := s.Stat(ctx, "sha256:"+string(make([]byte, 0))); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Stat of a malformed digest: %v", err)
	}
	missing := "sha256:0000000000000000000000000000000000000000000000000000000000000000"
	if _, err := s.Stat(ctx, missing); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Stat of a missing snapshot: %v", err)
	}
}
