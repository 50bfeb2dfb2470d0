package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestHostileUploadSpecialFiles: --upload reads regular files and
// directories only: a device, a fifo, a file of /proc (which looks
// regular and is not data) and a symbolic link inside a directory are
// refused before anything is read or sent.
func TestHostileUploadSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := mkfifo(fifo); err != nil {
		t.Fatal(err)
	}
	linked := filepath.Join(dir, "tree")
	os.Mkdir(linked, 0o755)
	os.WriteFile(filepath.Join(linked, "ok.txt"), []byte("ok"), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(linked, "passwd"))
	for _, tc := range []struct{ arg, want string }{
		{"/dev/null", "not a regular file"},
		{fifo, "not a regular file"},
		{"/proc/self/environ", "kernel pseudo file system"},
		{"/sys/kernel/mm/transparent_hugepage/enabled", "kernel pseudo file system"},
		{linked, "is a symbolic link inside"},
	} {
		_, err := packUploads([]string{tc.arg})
		var ue usageError
		if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--upload %s: %v, want a usage error saying %q", tc.arg, err, tc.want)
		}
	}
}

// TestUploadArchive: a file and a directory become sandbox paths, the
// file by its name under /workspace, the directory at its DEST; a link
// named as the argument itself is followed (the user named it).
func TestUploadArchive(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "data.csv"), []byte("a,b\n"), 0o644)
	os.MkdirAll(filepath.Join(dir, "docs", "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "docs", "sub", "x.md"), []byte("# x\n"), 0o600)
	os.Symlink(filepath.Join(dir, "data.csv"), filepath.Join(dir, "link.csv"))
	archive, err := packUploads([]string{filepath.Join(dir, "data.csv"), filepath.Join(dir, "docs") + ":/srv/docs", filepath.Join(dir, "link.csv")})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		got = append(got, h.Name+"="+string(body))
	}
	want := "workspace/data.csv=a,b\n srv/docs/= srv/docs/sub/= srv/docs/sub/x.md=# x\n workspace/link.csv=a,b\n"
	if strings.Join(got, " ") != want {
		t.Errorf("archive entries:\n%q\nwant\n%q", strings.Join(got, " "), want)
	}
	if _, err := packUploads([]string{filepath.Join(dir, "data.csv") + ":/"}); err == nil {
		t.Error("an upload to / was taken")
	}
}

func mkfifo(p string) error { return syscall.Mkfifo(p, 0o644) }
