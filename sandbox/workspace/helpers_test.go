package workspace

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/internal/testenv"
	"github.com/reinsdev/reins/sandbox/rootfs"
)

// disk makes a real ext4 loop disk of size bytes, mounted as the manager
// mounts a sandbox's (nosuid, nodev), and returns its upper layer.
func disk(t testing.TB, size int64) string {
	t.Helper()
	testenv.RequiresRoot(t)
	testenv.RequiresBinary(t, "mkfs.ext4", "e2fsprogs")
	l := rootfs.Layout{Dir: filepath.Join(t.TempDir(), "sb")}
	t.Cleanup(func() {
		if err := rootfs.Remove(l); err != nil {
			t.Errorf("removing the test disk: %v", err)
		}
	})
	if err := rootfs.CreateDisk(context.Background(), l, size); err != nil {
		t.Fatal(err)
	}
	if err := rootfs.MountDisk(l); err != nil {
		t.Fatal(err)
	}
	return l.Upper()
}

// store opens a store in a fresh directory with no grace period.
func store(t testing.TB, dir string) *Store {
	t.Helper()
	if dir == "" {
		dir = filepath.Join(t.TempDir(), "ws")
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s.grace = 0
	t.Cleanup(func() { s.Close() })
	return s
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func writeFile(t testing.TB, p string, data []byte, mode os.FileMode) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(t, os.WriteFile(p, data, mode))
	must(t, os.Chmod(p, mode))
}

// pattern is n bytes that differ per seed and per MiB.
func pattern(seed string, n int) []byte {
	out := make([]byte, 0, n)
	for i := 0; len(out) < n; i++ {
		h := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", seed, i)))
		out = append(out, h[:]...)
	}
	return out[:n]
}

// describe lists everything about the tree at root that a snapshot must
// keep, one line per entry, sorted: type, mode, owner, times (mtime;
// atime for files), size, content hash, allocated-ness, link target,
// extended attributes, and which names share an inode.
func describe(t testing.TB, root string) []string {
	t.Helper()
	var out []string
	inodes := map[uint64][]string{}
	err := filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		line := fmt.Sprintf("%q mode=%o uid=%d gid=%d mtime=%d.%09d", rel, st.Mode, st.Uid, st.Gid, st.Mtim.Sec, st.Mtim.Nsec)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			line += fmt.Sprintf(" size=%d sha=%x sparse=%v atime=%d", st.Size, sum[:8], st.Blocks*512 < st.Size/2, st.Atim.Sec)
			if st.Nlink > 1 {
				inodes[st.Ino] = append(inodes[st.Ino], rel)
			}
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" -> %q", target)
		case unix.S_IFCHR:
			line += fmt.Sprintf(" rdev=%d", st.Rdev)
		}
		line += " " + xattrsOf(t, p)
		out = append(out, line)
		return nil
	})
	must(t, err)
	for _, names := range inodes {
		sort.Strings(names)
		out = append(out, "linked "+strings.Join(names, " = "))
	}
	sort.Strings(out)
	return out
}

func xattrsOf(t testing.TB, p string) string {
	buf := make([]byte, 64<<10)
	n, err := unix.Llistxattr(p, buf)
	if err != nil || n == 0 {
		return "xattrs{}"
	}
	names := strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00")
	slices.Sort(names)
	var parts []string
	for _, nm := range names {
		v, err := unix.Lgetxattr(p, nm, buf)
		if err != nil {
			t.Fatalf("getxattr %s %s: %v", p, nm, err)
		}
		parts = append(parts, fmt.Sprintf("%s=%q", nm, buf[:v]))
	}
	return "xattrs{" + strings.Join(parts, ",") + "}"
}

func sameTree(t testing.TB, want, got string) {
	t.Helper()
	w, g := describe(t, want), describe(t, got)
	if !slices.Equal(w, g) {
		var diff bytes.Buffer
		for _, l := range w {
			if !slices.Contains(g, l) {
				fmt.Fprintf(&diff, "- %s\n", l)
			}
		}
		for _, l := range g {
			if !slices.Contains(w, l) {
				fmt.Fprintf(&diff, "+ %s\n", l)
			}
		}
		t.Fatalf("restored tree differs (- captured, + restored):\n%s", diff.String())
	}
}
