package archive_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reinsdev/reins/archive"
	"github.com/reinsdev/reins/errdefs"
)

// hostile builds the tar streams a hostile sandbox (or client) could send.
// Entries are written as given: no name is cleaned, no size checked.
type hostile struct {
	t   testing.TB
	buf bytes.Buffer
	tw  *tar.Writer
}

func newHostile(t testing.TB) *hostile {
	h := &hostile{t: t}
	h.tw = tar.NewWriter(&h.buf)
	return h
}

func (h *hostile) add(hdr tar.Header, body string) *hostile {
	h.t.Helper()
	if hdr.Mode == 0 {
		hdr.Mode = 0o644
	}
	if hdr.Typeflag == tar.TypeReg {
		hdr.Size = int64(len(body))
	}
	must(h.t, h.tw.WriteHeader(&hdr))
	if body != "" {
		_, err := h.tw.Write([]byte(body))
		must(h.t, err)
	}
	return h
}

func (h *hostile) file(name, body string) *hostile {
	return h.add(tar.Header{Name: name, Typeflag: tar.TypeReg}, body)
}
func (h *hostile) dir(name string, mode int64) *hostile {
	return h.add(tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: mode}, "")
}
func (h *hostile) symlink(name, target string) *hostile {
	return h.add(tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target}, "")
}
func (h *hostile) hardlink(name, target string) *hostile {
	return h.add(tar.Header{Name: name, Typeflag: tar.TypeLink, Linkname: target}, "")
}
func (h *hostile) node(name string, typ byte, major, minor int64) *hostile {
	return h.add(tar.Header{Name: name, Typeflag: typ, Devmajor: major, Devminor: minor, Mode: 0o666}, "")
}

// claim writes a header that claims size bytes and ends the stream there,
// as a header that lies does.
func (h *hostile) claim(name string, size int64) *hostile {
	h.t.Helper()
	must(h.t, h.tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Size: size, Mode: 0o644}))
	h.tw = nil // the stream ends inside the entry
	return h
}

func (h *hostile) bytes() []byte {
	h.t.Helper()
	if h.tw != nil {
		must(h.t, h.tw.Close())
	}
	return h.buf.Bytes()
}

// hostileCase is one stream fed to Extract into dst, a directory that
// holds the user's files (secret, keep/precious) beside a directory
// outside it (outside/victim). Entries are under x/, as cp names them.
type hostileCase struct {
	name string
	pre  func(t *testing.T, dst, outside string) // what is on disk before
	tar  func(h *hostile, dst, outside string) *hostile
	says string // "" if the archive is fine
	kind error  // default ErrInvalidArgument
	post func(t *testing.T, dst string)
}

func hostileCases() []hostileCase {
	reg := func(p string) func(*testing.T, string) {
		return func(t *testing.T, dst string) {
			t.Helper()
			if fi, err := os.Lstat(filepath.Join(dst, p)); err == nil {
				t.Errorf("%s was made: %v", p, fi.Mode())
			}
		}
	}
	return []hostileCase{
		{name: "dotdot", tar: func(h *hostile, _, _ string) *hostile { return h.file("x/../../outside/victim", "pwned") },
			says: `entry "x/../../outside/victim" has a ".." component`},
		{name: "absolute name", tar: func(h *hostile, _, out string) *hostile { return h.file(out+"/victim", "pwned") },
			says: "has an absolute name"},
		{name: "symlink out, then a file through it",
			tar: func(h *hostile, _, _ string) *hostile {
				return h.symlink("x/l", "../../outside").file("x/l/victim", "pwned")
			},
			says: `entry "x/l/victim" is beneath "x/l", a symbolic link`},
		{name: "absolute symlink, then a file through it",
			tar:  func(h *hostile, _, out string) *hostile { return h.symlink("x/l", out).file("x/l/victim", "pwned") },
			says: `entry "x/l/victim" is beneath "x/l", a symbolic link`},
		{name: "symlink within the destination, then a file through it",
			tar:  func(h *hostile, _, _ string) *hostile { return h.symlink("x/l", "..").file("x/l/secret", "pwned") },
			says: `entry "x/l/secret" is beneath "x/l", a symbolic link`},
		{name: "symlink chain",
			tar: func(h *hostile, _, _ string) *hostile {
				return h.symlink("x/a", "b").symlink("x/b", "..").file("x/a/secret", "pwned")
			},
			says: `entry "x/a/secret" is beneath "x/a", a symbolic link`},
		{name: "symlink on disk within the destination, then a file through it",
			pre: func(t *testing.T, dst, _ string) {
				must(t, os.MkdirAll(filepath.Join(dst, "x"), 0o755))
				must(t, os.Symlink("../keep", filepath.Join(dst, "x/pre")))
			},
			tar:  func(h *hostile, _, _ string) *hostile { return h.file("x/pre/precious", "pwned") },
			says: `entry "x/pre/precious" is beneath "x/pre", a symbolic link`},
		{name: "symlink on disk out, then a file through it",
			pre: func(t *testing.T, dst, out string) {
				must(t, os.MkdirAll(filepath.Join(dst, "x"), 0o755))
				must(t, os.Symlink(out, filepath.Join(dst, "x/out")))
			},
			tar:  func(h *hostile, _, _ string) *hostile { return h.file("x/out/victim", "pwned") },
			says: `entry "x/out/victim" is beneath "x/out", a symbolic link`},
		{name: "symlink, then a file of its name",
			tar: func(h *hostile, _, out string) *hostile {
				return h.symlink("x/f", out+"/victim").file("x/f", "replaced, not followed")
			},
			post: func(t *testing.T, dst string) {
				if b, _ := os.ReadFile(filepath.Join(dst, "x/f")); string(b) != "replaced, not followed" {
					t.Errorf("x/f = %q", b)
				}
			}},
		{name: "hard link out", tar: func(h *hostile, _, _ string) *hostile { return h.hardlink("x/h", "../outside/victim") },
			says: `entry "x/h" is a hard link to "../outside/victim", outside the destination`, post: reg("x/h")},
		{name: "hard link to a file already there, then written",
			tar:  func(h *hostile, _, _ string) *hostile { return h.hardlink("x/h", "secret").file("x/h", "pwned") },
			says: `entry "x/h" is a hard link to "secret", which no earlier entry of the archive made`, post: reg("x/h")},
		{name: "hard link, then a file of its name",
			tar: func(h *hostile, _, _ string) *hostile {
				return h.file("x/a", "a").hardlink("x/h", "x/a").file("x/h", "new")
			},
			post: func(t *testing.T, dst string) {
				a, _ := os.ReadFile(filepath.Join(dst, "x/a"))
				b, _ := os.ReadFile(filepath.Join(dst, "x/h"))
				if string(a) != "a" || string(b) != "new" {
					t.Errorf("x/a = %q, x/h = %q: the new file was written through the link", a, b)
				}
			}},
		{name: "hard link to a directory",
			tar:  func(h *hostile, _, _ string) *hostile { return h.dir("x/d/", 0o755).hardlink("x/h", "x/d") },
			says: `entry "x/h" is a hard link to "x/d", which no earlier entry`},
		{name: "block device", tar: func(h *hostile, _, _ string) *hostile { return h.node("x/sda", tar.TypeBlock, 254, 0) },
			says: `entry "x/sda" is a block device (254:0): images and archives may not carry device nodes, fifos or sockets`, post: reg("x/sda")},
		{name: "character device", tar: func(h *hostile, _, _ string) *hostile { return h.node("x/mem", tar.TypeChar, 1, 1) },
			says: `entry "x/mem" is a character device (1:1): images and archives may not carry device nodes`, post: reg("x/mem")},
		{name: "fifo", tar: func(h *hostile, _, _ string) *hostile { return h.node("x/p", tar.TypeFifo, 0, 0) },
			says: `entry "x/p" is a fifo: images and archives may not carry device nodes, fifos or sockets`, post: reg("x/p")},
		{name: "fifo, then a file beneath it",
			tar:  func(h *hostile, _, _ string) *hostile { return h.node("x/p", tar.TypeFifo, 0, 0).file("x/p/f", "x") },
			says: `entry "x/p" is a fifo`},
		{name: "a size past the cap", tar: func(h *hostile, _, _ string) *hostile { return h.claim("x/big", 1<<40) },
			says: `entry "x/big" claims 1099511627776 bytes, which would take the archive past its cap of 68719476736 bytes`,
			kind: errdefs.ErrTooLarge, post: reg("x/big")},
		{name: "truncated file", tar: func(h *hostile, _, _ string) *hostile { return h.claim("x/short", 1000) },
			says: `entry "x/short": the tar stream ends inside it`, post: reg("x/short")},
		{name: "long file name", tar: func(h *hostile, _, _ string) *hostile { return h.file("x/"+strings.Repeat("n", 300), "x") },
			says: "has a component of 300 bytes, more than the 255 a file name may have"},
		{name: "long path", tar: func(h *hostile, _, _ string) *hostile { return h.file("x/"+strings.Repeat("d/", 2100)+"f", "x") },
			says: "more than the 4095 a path may have", post: reg("x/d")},
		{name: "duplicate files",
			tar: func(h *hostile, _, _ string) *hostile { return h.file("x/f", "one").file("x/f", "two") },
			post: func(t *testing.T, dst string) {
				if b, _ := os.ReadFile(filepath.Join(dst, "x/f")); string(b) != "two" {
					t.Errorf("x/f = %q, want the later entry", b)
				}
			}},
		{name: "duplicate: a file over the archive's own directory",
			tar: func(h *hostile, _, _ string) *hostile {
				return h.dir("x/d/", 0o755).file("x/d/in", "in").file("x/d", "file")
			},
			says: `entry "x/d": a directory is in the way`, kind: errdefs.ErrAlreadyExists},
		{name: "a file over a directory already there",
			pre: func(t *testing.T, dst, _ string) {
				must(t, os.MkdirAll(filepath.Join(dst, "x/d"), 0o755))
				must(t, os.WriteFile(filepath.Join(dst, "x/d/inner"), []byte("mine"), 0o644))
			},
			tar:  func(h *hostile, _, _ string) *hostile { return h.file("x/d", "pwned") },
			says: `entry "x/d": a directory is in the way`, kind: errdefs.ErrAlreadyExists,
			post: func(t *testing.T, dst string) {
				if b, _ := os.ReadFile(filepath.Join(dst, "x/d/inner")); string(b) != "mine" {
					t.Errorf("x/d/inner = %q", b)
				}
			}},
		{name: "a directory over a symlink already there",
			pre: func(t *testing.T, dst, _ string) {
				must(t, os.MkdirAll(filepath.Join(dst, "x"), 0o755))
				must(t, os.Symlink("../keep", filepath.Join(dst, "x/l")))
			},
			tar:  func(h *hostile, _, _ string) *hostile { return h.dir("x/l/", 0o755).file("x/l/precious", "pwned") },
			says: `entry "x/l/" is a directory, but something else is in its place`,
			post: func(t *testing.T, dst string) {
				if l, err := os.Readlink(filepath.Join(dst, "x/l")); l != "../keep" {
					t.Errorf("the symlink x/l is gone: %q %v", l, err)
				}
			}},
		{name: "a directory over a file already there",
			pre: func(t *testing.T, dst, _ string) {
				must(t, os.MkdirAll(filepath.Join(dst, "x"), 0o755))
				must(t, os.WriteFile(filepath.Join(dst, "x/f"), []byte("mine"), 0o644))
			},
			tar:  func(h *hostile, _, _ string) *hostile { return h.dir("x/f/", 0o755) },
			says: `entry "x/f/" is a directory, but something else is in its place`,
			post: func(t *testing.T, dst string) {
				if b, _ := os.ReadFile(filepath.Join(dst, "x/f")); string(b) != "mine" {
					t.Errorf("x/f = %q", b)
				}
			}},
		{name: "a directory entry for one already there",
			pre: func(t *testing.T, dst, _ string) { must(t, os.MkdirAll(filepath.Join(dst, "x"), 0o750)) },
			tar: func(h *hostile, _, _ string) *hostile { return h.dir("x/", 0o777).dir("./", 0o777) },
			post: func(t *testing.T, dst string) {
				for _, p := range []string{dst, filepath.Join(dst, "x")} {
					if fi, _ := os.Stat(p); fi.Mode().Perm() == 0o777 {
						t.Errorf("%s: mode changed to %v", p, fi.Mode())
					}
				}
			}},
		{name: "set-user-ID",
			tar: func(h *hostile, _, _ string) *hostile {
				return h.add(tar.Header{Name: "x/suid", Typeflag: tar.TypeReg, Mode: 0o6755}, "#!/bin/sh")
			},
			post: func(t *testing.T, dst string) {
				if fi, _ := os.Stat(filepath.Join(dst, "x/suid")); fi.Mode() != 0o755 {
					t.Errorf("x/suid: mode %v, want -rwxr-xr-x", fi.Mode())
				}
			}},
		{name: "unsupported type", tar: func(h *hostile, _, _ string) *hostile {
			return h.add(tar.Header{Name: "x/c", Typeflag: tar.TypeCont}, "")
		}, says: `entry "x/c" has an unsupported type`},
	}
}

// TestExtractHostile feeds Extract each hostile archive: it must refuse
// it with an error that names the entry, write nothing outside its
// destination, make no device node or fifo, and lose nothing that was
// there.
func TestExtractHostile(t *testing.T) {
	for _, tc := range hostileCases() {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			outside, dst := filepath.Join(parent, "outside"), filepath.Join(parent, "dst")
			must(t, os.MkdirAll(outside, 0o755))
			must(t, os.MkdirAll(filepath.Join(dst, "keep"), 0o755))
			must(t, os.WriteFile(filepath.Join(outside, "victim"), []byte("safe"), 0o644))
			must(t, os.WriteFile(filepath.Join(dst, "secret"), []byte("mine"), 0o644))
			must(t, os.WriteFile(filepath.Join(dst, "keep/precious"), []byte("mine"), 0o644))
			if tc.pre != nil {
				tc.pre(t, dst, outside)
			}
			_, _, err := archive.Extract(bytes.NewReader(tc.tar(newHostile(t), dst, outside).bytes()), dst)
			checkRefusal(t, err, tc.says, tc.kind)
			for p, want := range map[string]string{
				filepath.Join(outside, "victim"): "safe", filepath.Join(dst, "secret"): "mine", filepath.Join(dst, "keep/precious"): "mine",
			} {
				if b, err := os.ReadFile(p); string(b) != want {
					t.Errorf("%s = %q (%v), want %q", p, b, err, want)
				}
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 1 {
				t.Errorf("files appeared outside: %v", ents)
			}
			noSpecialFiles(t, parent)
			if tc.post != nil {
				tc.post(t, dst)
			}
		})
	}
}

func checkRefusal(t *testing.T, err error, says string, kind error) {
	t.Helper()
	if says == "" {
		if err != nil {
			t.Fatalf("refused a fine archive: %v", err)
		}
		return
	}
	if kind == nil {
		kind = errdefs.ErrInvalidArgument
	}
	if err == nil {
		t.Fatalf("extracted without error; want one saying %q", says)
	}
	if !errors.Is(err, kind) || !strings.Contains(err.Error(), says) {
		t.Fatalf("got %v (kind %v), want a %v error saying %q", err, errdefs.Kind(err), kind, says)
	}
}

// noSpecialFiles fails if anything under dir is a device node, fifo or
// socket.
func noSpecialFiles(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0 {
			t.Errorf("%s is a %v", p, d.Type())
		}
		return nil
	})
}
