package archive_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/archive"
	"github.com/reinsdev/reins/errdefs"
)

func layerOpts() archive.Options {
	wh := archive.OverlayWhiteouts
	if os.Geteuid() != 0 {
		wh = archive.UserOverlayWhiteouts
	}
	return archive.Options{Whiteouts: wh, Layer: true}
}

func TestExtractLayer(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "layer")
	h := newHostile(t).
		dir("./", 0o750).
		add(tar.Header{Name: "bin/su", Typeflag: tar.TypeReg, Mode: 0o4755, Uid: 1000, Gid: 1000}, "su").
		dir("real/", 0o755).
		symlink("alias", "real").
		file("alias/file", "through the layer's own link").
		file(".wh.gone", "").
		dir("opq/", 0o755).
		file("opq/.wh..wh..opq", "").
		file(".wh..wh.plnk", "").
		dir("was-dir/", 0o755).file("was-dir/in", "x").
		file("was-dir", "a file now").
		dir("ro/", 0o555).file("ro/in", "filled before it became read-only").
		dir("t1/", 0o755).symlink("via", "t1").file("via/a", "a").
		dir("t1/", 0o755).file("t1", "t1 is a file now").dir("t1/", 0o755). // a new t1, reached again through via
		file("via/b", "b")
	_, _, err := layerOpts().Extract(bytes.NewReader(h.bytes()), dst)
	must(t, err)
	defer os.Chmod(filepath.Join(dst, "ro"), 0o755)

	if fi, _ := os.Stat(dst); fi.Mode().Perm() != 0o750 {
		t.Errorf("the layer's root: %v, want its \".\" entry's mode", fi.Mode())
	}
	var st unix.Stat_t
	must(t, unix.Lstat(filepath.Join(dst, "bin/su"), &st))
	if st.Mode&0o7777 != 0o4755 {
		t.Errorf("bin/su mode %o, want the set-user-ID bit kept", st.Mode&0o7777)
	}
	if os.Geteuid() == 0 && (st.Uid != 1000 || st.Gid != 1000) {
		t.Errorf("bin/su owned by %d:%d, want 1000:1000", st.Uid, st.Gid)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "real/file")); string(b) != "through the layer's own link" {
		t.Errorf("real/file = %q", b)
	}
	must(t, unix.Lstat(filepath.Join(dst, "gone"), &st))
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("gone is not a whiteout: mode %o rdev %d", st.Mode, st.Rdev)
	}
	attr := "trusted.overlay.opaque"
	if os.Geteuid() != 0 {
		attr = "user.overlay.opaque"
	}
	buf := make([]byte, 4)
	if n, err := unix.Lgetxattr(filepath.Join(dst, "opq"), attr, buf); err != nil || string(buf[:n]) != "y" {
		t.Errorf("opq: %s = %q, %v", attr, buf[:n], err)
	}
	for _, p := range []string{".wh.gone", "opq/.wh..wh..opq", ".wh..wh.plnk", "plnk"} {
		if _, err := os.Lstat(filepath.Join(dst, p)); err == nil {
			t.Errorf("%s exists", p)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "was-dir")); string(b) != "a file now" {
		t.Errorf("was-dir = %q: a later entry replaces a directory in a layer", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "t1/b")); string(b) != "b" {
		t.Errorf("t1/b = %q: an entry through a link went to the directory the link led to before", b)
	}
	if fi, _ := os.Stat(filepath.Join(dst, "ro")); fi.Mode().Perm() != 0o555 {
		t.Errorf("ro: %v", fi.Mode())
	}
}

func TestExtractLayerRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		tar  func(*hostile) *hostile
		says string
	}{
		{"block device", func(h *hostile) *hostile { return h.node("dev/sda", tar.TypeBlock, 254, 0) },
			`entry "dev/sda" is a block device (254:0): images and archives may not carry device nodes, fifos or sockets`},
		{"whiteout in a lower layer's name, through a link out", func(h *hostile) *hostile { return h.symlink("evil", "/tmp").file("evil/.wh.x", "") },
			`entry "evil/.wh.x" would be written through a symbolic link that leads outside the destination`},
		{"file through a relative link out", func(h *hostile) *hostile { return h.symlink("evil", "../..").file("evil/x", "pwned") },
			`entry "evil/x" would be written through a symbolic link that leads outside`},
		{"hard link to a whiteout", func(h *hostile) *hostile { return h.file(".wh.w", "").hardlink("h", "w") },
			`entry "h" is a hard link to "w", which no earlier entry of the archive made`},
		{"a root that is not a directory", func(h *hostile) *hostile { return h.file(".", "x") },
			`names the destination itself but is not a directory`},
		{"a whiteout of nothing", func(h *hostile) *hostile { return h.file("d/.wh.", "") },
			`entry "d/.wh." is a whiteout that names nothing`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			_, _, err := layerOpts().Extract(bytes.NewReader(tc.tar(newHostile(t)).bytes()), filepath.Join(parent, "layer"))
			checkRefusal(t, err, tc.says, nil)
			if ents, _ := os.ReadDir(parent); len(ents) != 1 {
				t.Errorf("written beside the layer: %v", ents)
			}
			if _, err := os.Lstat("/tmp/x"); err == nil {
				t.Errorf("/tmp/x exists")
			}
		})
	}
}

func TestExtractNoWhiteoutsKeepsWhFiles(t *testing.T) {
	dst := t.TempDir()
	_, _, err := archive.Extract(bytes.NewReader(newHostile(t).file(".wh.x", "a file").bytes()), dst)
	must(t, err)
	if b, _ := os.ReadFile(filepath.Join(dst, ".wh.x")); string(b) != "a file" {
		t.Errorf(".wh.x = %q", b)
	}
}

func TestExtractCaps(t *testing.T) {
	many := newHostile(t)
	for i := range 11 {
		many.file("f"+strings.Repeat("x", i), "")
	}
	_, _, err := archive.Options{MaxEntries: 10}.Extract(bytes.NewReader(many.bytes()), t.TempDir())
	if !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), `entry "fxxxxxxxxxx" is past the cap of 10 entries`) {
		t.Errorf("11 entries, cap 10: %v", err)
	}
	dst := t.TempDir()
	big := newHostile(t).file("a", strings.Repeat("a", 60)).file("b", strings.Repeat("b", 60))
	_, _, err = archive.Options{MaxBytes: 100}.Extract(bytes.NewReader(big.bytes()), dst)
	if !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), `entry "b" claims 60 bytes, which would take the archive past its cap of 100 bytes`) {
		t.Errorf("120 bytes, cap 100: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "b")); err == nil {
		t.Errorf("b was made")
	}
	if _, _, err := (archive.Options{MaxBytes: -1, MaxEntries: -1}).Extract(bytes.NewReader(big.bytes()), t.TempDir()); err != nil {
		t.Errorf("no caps: %v", err)
	}
}
