package archive_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/reinsdev/reins/archive"
	"github.com/reinsdev/reins/errdefs"
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestWriteExtractRoundTrip(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	must(t, os.MkdirAll(filepath.Join(src, "d/e"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "f"), []byte("file"), 0o640))
	must(t, os.WriteFile(filepath.Join(src, "d/e/g"), []byte("deep"), 0o755))
	must(t, os.Chmod(filepath.Join(src, "d/e/g"), 0o755))
	must(t, os.Symlink("d/e/g", filepath.Join(src, "link")))
	must(t, os.Symlink("/nonexistent/target", filepath.Join(src, "dangling")))
	must(t, os.Mkdir(filepath.Join(src, "ro"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "ro/inside"), []byte("x"), 0o644))
	must(t, os.Chmod(filepath.Join(src, "ro"), 0o555))
	mtime := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	must(t, os.Chtimes(filepath.Join(src, "f"), mtime, mtime))

	var buf bytes.Buffer
	must(t, archive.Write(&buf, src))
	var names []string
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		must(t, err)
		names = append(names, h.Name)
	}
	want := "src/ src/d/ src/d/e/ src/d/e/g src/dangling src/f src/link src/ro/ src/ro/inside"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("entries %q, want %q", got, want)
	}

	dst := t.TempDir()
	files, n, err := archive.Extract(&buf, dst)
	must(t, err)
	if files != 5 || n != 4+4+1 {
		t.Errorf("Extract = %d files, %d bytes", files, n)
	}
	check := func(p string, mode os.FileMode) {
		t.Helper()
		fi, err := os.Lstat(filepath.Join(dst, "src", p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != mode {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode(), mode)
		}
	}
	check("f", 0o640)
	check("d/e/g", 0o755)
	check("ro", os.ModeDir|0o555)
	check("link", os.ModeSymlink|0o777)
	if fi, _ := os.Stat(filepath.Join(dst, "src/f")); !fi.ModTime().Equal(mtime) {
		t.Errorf("mtime %v, want %v", fi.ModTime(), mtime)
	}
	if l, _ := os.Readlink(filepath.Join(dst, "src/dangling")); l != "/nonexistent/target" {
		t.Errorf("dangling link to %q", l)
	}
	os.Chmod(filepath.Join(dst, "src/ro"), 0o755) // let t.TempDir clean up

	// A single file is one entry named after it; a symlink given as the
	// source is followed.
	buf.Reset()
	must(t, archive.Write(&buf, filepath.Join(src, "link")))
	tr = tar.NewReader(&buf)
	h, err := tr.Next()
	if err != nil || h.Name != "link" || h.Typeflag != tar.TypeReg || h.Size != 4 {
		t.Errorf("tar of a symlink to a file: %+v %v", h, err)
	}
}

type entry struct {
	hdr  tar.Header
	data string
}

func tarOf(t *testing.T, entries ...entry) *bytes.Buffer {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.data))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		must(t, tw.WriteHeader(&h))
		io.WriteString(tw, e.data)
	}
	must(t, tw.Close())
	return &buf
}

func reg(name, data string) entry {
	return entry{tar.Header{Name: name, Typeflag: tar.TypeReg}, data}
}

func TestExtractDropsSetuidAndReplacesSafely(t *testing.T) {
	dst := t.TempDir()
	buf := tarOf(t,
		entry{tar.Header{Name: "suid", Typeflag: tar.TypeReg, Mode: 0o4755}, "x"},
		entry{tar.Header{Name: "dir/", Typeflag: tar.TypeDir, Mode: 0o2775}, ""},
		reg("no/parent/entries/file", "y"), // no directory entries: made
	)
	_, _, err := archive.Extract(buf, dst)
	must(t, err)
	if fi, _ := os.Stat(filepath.Join(dst, "suid")); fi.Mode() != 0o755 {
		t.Errorf("suid file mode %v, want 0755", fi.Mode())
	}
	if fi, _ := os.Stat(filepath.Join(dst, "dir")); fi.Mode() != os.ModeDir|0o775 {
		t.Errorf("setgid dir mode %v, want drwxrwxr-x", fi.Mode())
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "no/parent/entries/file")); string(b) != "y" {
		t.Errorf("file without parent entries: %q", b)
	}
	// Extracting again over the same tree replaces files.
	_, _, err = archive.Extract(tarOf(t, reg("suid", "new")), dst)
	must(t, err)
	if b, _ := os.ReadFile(filepath.Join(dst, "suid")); string(b) != "new" {
		t.Errorf("replaced content %q", b)
	}
}

func TestExtractBadStream(t *testing.T) {
	_, _, err := archive.Extract(strings.NewReader(strings.Repeat("garbage!", 200)), t.TempDir())
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("garbage: %v", err)
	}
}

// TestExtractSourceError: a source that fails (a dropped connection, a
// timeout) keeps its error's kind; a tar cut short by a source that just
// ends is a malformed stream.
func TestExtractSourceError(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "a", Mode: 0o644, Size: 3, Typeflag: tar.TypeReg})
	tw.Write([]byte("abc"))
	tw.Close()
	whole := buf.Bytes()
	failing := io.MultiReader(bytes.NewReader(whole[:512+512]), iotest.ErrReader(fmt.Errorf("the peer went: %w", errdefs.ErrUnavailable)))
	_, _, err := archive.Extract(failing, t.TempDir())
	if !errors.Is(err, errdefs.ErrUnavailable) || errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a failing source: %v, want unavailable", err)
	}
	_, _, err = archive.Extract(bytes.NewReader(whole[:100]), t.TempDir())
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a short stream: %v, want invalid argument", err)
	}
}
