package executor_test

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor"
)

func TestStatAndListDir(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	e.writeHost("d/a.txt", "hello")
	e.writeHost("d/sub/b.txt", "x")
	if err := os.Symlink("a.txt", e.host("d/link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(e.host("d/a.txt"), 0o640); err != nil {
		t.Fatal(err)
	}
	info, err := e.c.Stat(ctx, "/d/a.txt")
	if err != nil {
		t.Fatal(err)
	}
	if info.Path != "/d/a.txt" || info.Name != "a.txt" || info.Type != executorv1.FileType_FILE_TYPE_FILE || info.Size != 5 || info.Mode != 0o640 || info.MtimeUnixNano == 0 {
		t.Errorf("Stat = %v", info)
	}
	info, err = e.c.Stat(ctx, "d/link") // relative to the workdir, "/"
	if err != nil || info.Type != executorv1.FileType_FILE_TYPE_SYMLINK || info.SymlinkTarget != "a.txt" {
		t.Errorf("Stat of a symlink = %v, %v", info, err)
	}
	_, err = e.c.Stat(ctx, "/nope")
	wantKind(t, err, errdefs.ErrNotFound, "/nope")

	list, err := e.c.ListDir(ctx, "/d", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(list.Entries); !slices.Equal(got, []string{"/d/a.txt", "/d/link", "/d/sub"}) || list.Truncated {
		t.Errorf("ListDir depth 1 = %v %v", got, list.Truncated)
	}
	list, err = e.c.ListDir(ctx, "/d", 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(list.Entries); !slices.Equal(got, []string{"/d/a.txt", "/d/link", "/d/sub", "/d/sub/b.txt"}) {
		t.Errorf("ListDir depth 2 = %v", got)
	}
	list, err = e.c.ListDir(ctx, "/d", 2, 2)
	if err != nil || len(list.Entries) != 2 || !list.Truncated {
		t.Errorf("ListDir limit 2 = %v, %v", list, err)
	}
	_, err = e.c.ListDir(ctx, "/d/a.txt", 0, 0)
	wantKind(t, err, errdefs.ErrInvalidArgument, "not a directory")
}

func paths(infos []*executorv1.FileInfo) []string {
	var out []string
	for _, i := range infos {
		out = append(out, i.Path)
	}
	return out
}

func TestReadFile(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	e.writeHost("f", "0123456789")
	data, err := e.c.ReadFile(ctx, "/f")
	if err != nil || string(data) != "0123456789" {
		t.Fatalf("ReadFile = %q, %v", data, err)
	}
	r, err := e.c.ReadFileRange(ctx, "/f", 3, 4)
	if err != nil || string(r.Data) != "3456" || r.Size != 10 || r.Eof {
		t.Errorf("range 3+4 = %v, %v", r, err)
	}
	r, err = e.c.ReadFileRange(ctx, "/f", 8, 100)
	if err != nil || string(r.Data) != "89" || !r.Eof {
		t.Errorf("range 8+100 = %v, %v", r, err)
	}
	big := bytes.Repeat([]byte("x"), 17<<20)
	if err := os.WriteFile(e.host("big"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = e.c.ReadFile(ctx, "/big")
	wantKind(t, err, errdefs.ErrTooLarge, "/big is 17.0 MiB", "offset and limit")
	_, err = e.c.ReadFileRange(ctx, "/big", 0, 17<<20)
	wantKind(t, err, errdefs.ErrTooLarge, "16 MiB")
	r, err = e.c.ReadFileRange(ctx, "/big", 16<<20, 0)
	if err != nil || len(r.Data) != 1<<20 || !r.Eof {
		t.Errorf("the last MiB by offset: %d bytes, %v", len(r.Data), err)
	}
	_, err = e.c.ReadFile(ctx, "/")
	wantKind(t, err, errdefs.ErrInvalidArgument, "is a directory")
	_, err = e.c.ReadFile(ctx, "/missing")
	wantKind(t, err, errdefs.ErrNotFound, "/missing")
}

func TestConfinement(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(e.root, outside)
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.Symlink(outside, e.host("abs")))            // absolute link out
	must(t, os.Symlink(rel, e.host("rel")))                // relative link out
	must(t, os.Symlink(outside+"/secret", e.host("file"))) // a file out
	for _, p := range []string{"../../../../" + outside + "/secret", "/../secret", "a/../../secret"} {
		_, err := e.c.ReadFile(ctx, p)
		wantKind(t, err, errdefs.ErrPermissionDenied, "leaves the sandbox's root")
	}
	for _, p := range []string{"/abs/secret", "/rel/secret", "/file"} {
		_, err := e.c.ReadFile(ctx, p)
		wantKind(t, err, errdefs.ErrPermissionDenied, "outside")
		err = e.c.WriteFile(ctx, p, []byte("pwned"), 0)
		wantKind(t, err, errdefs.ErrPermissionDenied, "outside")
		_, err = e.c.EditFile(ctx, p, "secret", "pwned", false)
		wantKind(t, err, errdefs.ErrPermissionDenied, "outside")
	}
	_, err = e.c.ListDir(ctx, "/abs", 0, 0)
	wantKind(t, err, errdefs.ErrPermissionDenied, "outside")
	err = e.c.MakeDir(ctx, "/rel/newdir", true)
	wantKind(t, err, errdefs.ErrPermissionDenied)
	err = e.c.Move(ctx, "/rel/secret", "/stolen", false)
	wantKind(t, err, errdefs.ErrPermissionDenied)
	var buf bytes.Buffer
	_, err = e.c.Download(ctx, "/abs", &buf)
	wantKind(t, err, errdefs.ErrPermissionDenied)
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "secret" {
		t.Errorf("the file outside was changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(outside, "newdir")); err == nil {
		t.Error("a directory was made outside")
	}
	// Links that stay inside work.
	e.writeHost("in/target", "ok")
	e.writeHost("d/x", "")
	must(t, os.Symlink("../in/target", e.host("d/inlink")))
	if data, err := e.c.ReadFile(ctx, "/d/inlink"); err != nil || string(data) != "ok" {
		t.Errorf("ReadFile through an inside link: %q %v", data, err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestWriteFile(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	if err := e.c.WriteFile(ctx, "/a/b/c.txt", []byte("one"), 0); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(e.host("a/b/c.txt"))
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("new file: %v %v", fi, err)
	}
	must(t, os.Chmod(e.host("a/b/c.txt"), 0o755))
	if err := e.c.WriteFile(ctx, "/a/b/c.txt", []byte("two"), 0); err != nil {
		t.Fatal(err)
	}
	fi, _ = os.Stat(e.host("a/b/c.txt"))
	if b, _ := os.ReadFile(e.host("a/b/c.txt")); string(b) != "two" || fi.Mode().Perm() != 0o755 {
		t.Errorf("replaced file %q mode %v; want the mode kept", b, fi.Mode())
	}
	if err := e.c.WriteFile(ctx, "/a/b/c.txt", []byte("three"), 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, _ = os.Stat(e.host("a/b/c.txt")); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode())
	}
	// Through a symlink: the target is replaced, the link stays.
	must(t, os.Symlink("b/c.txt", e.host("a/link")))
	if err := e.c.WriteFile(ctx, "/a/link", []byte("four"), 0); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(e.host("a/b/c.txt")); string(b) != "four" {
		t.Errorf("target %q", b)
	}
	if fi, _ := os.Lstat(e.host("a/link")); fi.Mode()&os.ModeSymlink == 0 {
		t.Error("the link was replaced")
	}
	// No temporary files are left behind.
	entries, _ := os.ReadDir(e.host("a/b"))
	if len(entries) != 1 {
		t.Errorf("a/b has %v", entries)
	}
	_, err = e.c.RPC().WriteFile(ctx, connectReq(&executorv1.WriteFileRequest{Path: "/x/y", Data: []byte("z")}))
	wantKind(t, err, errdefs.ErrNotFound, "parent directory of /x/y does not exist", "make_parents")
	err = e.c.WriteFile(ctx, "/a", []byte("z"), 0)
	wantKind(t, err, errdefs.ErrInvalidArgument, "/a is a directory")
	err = e.c.WriteFile(ctx, "/big", bytes.Repeat([]byte("x"), 16<<20+1), 0)
	wantKind(t, err, errdefs.ErrTooLarge, "Upload")
}

func TestEditFile(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	e.writeHost("src/main.go", "package main\n\nfunc a() {}\nfunc b() {}\n")
	must(t, os.Chmod(e.host("src/main.go"), 0o600))
	n, err := e.c.EditFile(ctx, "/src/main.go", "func a() {}", "func a() { println() }", false)
	if err != nil || n != 1 {
		t.Fatal(n, err)
	}
	b, _ := os.ReadFile(e.host("src/main.go"))
	if string(b) != "package main\n\nfunc a() { println() }\nfunc b() {}\n" {
		t.Errorf("edited: %q", b)
	}
	if fi, _ := os.Stat(e.host("src/main.go")); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600 kept", fi.Mode())
	}
	_, err = e.c.EditFile(ctx, "/src/main.go", "func c()", "x", false)
	wantKind(t, err, errdefs.ErrInvalidArgument, "old text not found in /src/main.go")
	_, err = e.c.EditFile(ctx, "/src/main.go", "func", "fn", false)
	wantKind(t, err, errdefs.ErrInvalidArgument, "old text occurs 2 times in /src/main.go; add context or set replace_all")
	n, err = e.c.EditFile(ctx, "/src/main.go", "func", "fn", true)
	if err != nil || n != 2 {
		t.Fatal(n, err)
	}
	_, err = e.c.EditFile(ctx, "/src/none.go", "a", "b", false)
	wantKind(t, err, errdefs.ErrNotFound)
	_, err = e.c.EditFile(ctx, "/src/main.go", "", "b", false)
	wantKind(t, err, errdefs.ErrInvalidArgument, "empty")
}

func TestMakeDirRemoveMove(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	must(t, e.c.MakeDir(ctx, "/p/q/r", true))
	must(t, e.c.MakeDir(ctx, "/p/q/r", true)) // exists: fine with parents
	wantKind(t, e.c.MakeDir(ctx, "/p/q/r", false), errdefs.ErrAlreadyExists, "/p/q/r already exists")
	wantKind(t, e.c.MakeDir(ctx, "/x/y", false), errdefs.ErrNotFound, "set parents")
	_, err := e.c.RPC().MakeDir(ctx, connectReq(&executorv1.MakeDirRequest{Path: "/m", Mode: 0o700}))
	must(t, err)
	if fi, _ := os.Stat(e.host("m")); fi.Mode().Perm() != 0o700 {
		t.Errorf("mode %v", fi.Mode())
	}
	e.writeHost("p/q/r/f", "x")
	wantKind(t, e.c.Remove(ctx, "/p", false), errdefs.ErrFailedPrecondition, "not empty", "recursive")
	must(t, e.c.Move(ctx, "/p/q/r/f", "/p/g", false))
	e.writeHost("p/h", "h")
	wantKind(t, e.c.Move(ctx, "/p/g", "/p/h", false), errdefs.ErrAlreadyExists, "set overwrite")
	must(t, e.c.Move(ctx, "/p/g", "/p/h", true))
	if b, _ := os.ReadFile(e.host("p/h")); string(b) != "x" {
		t.Errorf("moved content %q", b)
	}
	wantKind(t, e.c.Move(ctx, "/p/none", "/p/z", false), errdefs.ErrNotFound)
	wantKind(t, e.c.Move(ctx, "/p", "/p/q/inside", false), errdefs.ErrInvalidArgument, "into itself")
	must(t, e.c.Remove(ctx, "/p/h", false))
	must(t, e.c.Remove(ctx, "/p", true))
	if _, err := os.Stat(e.host("p")); !os.IsNotExist(err) {
		t.Error("/p is still there")
	}
	wantKind(t, e.c.Remove(ctx, "/p", true), errdefs.ErrNotFound)
	wantKind(t, e.c.Remove(ctx, "/", true), errdefs.ErrInvalidArgument, "root directory")
}

func TestGlob(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	for _, p := range []string{"src/a.go", "src/b.txt", "src/x/c.go", "src/x/y/d.go", "top.go", ".hidden/e.go"} {
		e.writeHost(p, "")
	}
	must(t, os.Symlink("..", e.host("src/x/loop"))) // "**" must not loop through it
	for _, tc := range []struct {
		pattern, dir string
		want         []string
	}{
		{"*.go", "", []string{"/top.go"}},
		{"src/*.go", "", []string{"/src/a.go"}},
		{"**/*.go", "", []string{"/.hidden/e.go", "/src/a.go", "/src/x/c.go", "/src/x/y/d.go", "/top.go"}},
		{"src/**/*.go", "", []string{"/src/a.go", "/src/x/c.go", "/src/x/y/d.go"}},
		{"**/y/*.go", "/src", []string{"/src/x/y/d.go"}},
		{"/src/x/**", "", []string{"/src/x", "/src/x/c.go", "/src/x/loop", "/src/x/y", "/src/x/y/d.go"}},
		{"x/?.go", "/src", []string{"/src/x/c.go"}},
		{"nothing*", "", nil},
	} {
		got, truncated, err := e.c.Glob(ctx, tc.pattern, tc.dir)
		if err != nil || truncated || !slices.Equal(got, tc.want) {
			t.Errorf("Glob(%q, %q) = %v %v %v, want %v", tc.pattern, tc.dir, got, truncated, err, tc.want)
		}
	}
	resp, err := e.c.RPC().Glob(ctx, connectReq(&executorv1.GlobRequest{Pattern: "**/*.go", Limit: 2}))
	if err != nil || len(resp.Msg.Paths) != 2 || !resp.Msg.Truncated {
		t.Errorf("limited Glob = %v %v", resp, err)
	}
	_, _, err = e.c.Glob(ctx, "[", "")
	wantKind(t, err, errdefs.ErrInvalidArgument, "malformed")
}

func TestGrep(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	e.writeHost("r/a.go", "package a\nfunc Hello() {}\n")
	e.writeHost("r/b.txt", "hello world\nbye\n")
	e.writeHost("r/sub/c.go", "// HELLO\r\n")
	e.writeHost("r/bin.dat", "hello\x00binary")
	e.writeHost("r/.git/config", "hello from git")
	e.writeHost("r/long.txt", "x"+strings.Repeat("y", 200<<10)+"hello\nhello again\n")
	resp, err := e.c.Grep(ctx, &executorv1.GrepRequest{Pattern: "hello", Path: "/r", IgnoreCase: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range resp.Matches {
		got = append(got, m.Path+":"+string(rune('0'+m.Line)))
		if len(m.Text) > 1000 || strings.HasSuffix(m.Text, "\r") {
			t.Errorf("match text %d bytes, ends %q", len(m.Text), m.Text[max(0, len(m.Text)-3):])
		}
	}
	want := []string{"/r/a.go:2", "/r/b.txt:1", "/r/long.txt:1", "/r/long.txt:2", "/r/sub/c.go:1"}
	if !slices.Equal(got, want) {
		t.Errorf("Grep = %v, want %v", got, want)
	}
	resp, err = e.c.Grep(ctx, &executorv1.GrepRequest{Pattern: `func \w+`, Path: "/r", Include: "*.go"})
	if err != nil || len(resp.Matches) != 1 || resp.Matches[0].Text != "func Hello() {}" {
		t.Errorf("Grep with include = %v %v", resp, err)
	}
	resp, err = e.c.Grep(ctx, &executorv1.GrepRequest{Pattern: "hello", Path: "/r", IgnoreCase: true, Limit: 2})
	if err != nil || len(resp.Matches) != 2 || !resp.Truncated {
		t.Errorf("limited Grep = %v %v", resp, err)
	}
	resp, err = e.c.Grep(ctx, &executorv1.GrepRequest{Pattern: "bye", Path: "/r/b.txt"})
	if err != nil || len(resp.Matches) != 1 || resp.Matches[0].Line != 2 {
		t.Errorf("Grep of one file = %v %v", resp, err)
	}
	_, err = e.c.Grep(ctx, &executorv1.GrepRequest{Pattern: "(", Path: "/r"})
	wantKind(t, err, errdefs.ErrInvalidArgument, "RE2")
}

// TestRootSlash runs the executor as it runs in a sandbox, with Root "/":
// plain paths, and absolute symbolic links (common in images) work.
func TestRootSlash(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, func(c *executor.Config) { c.Root = "/"; c.Workdir = dir })
	ctx := ctxT(t)
	must(t, e.c.WriteFile(ctx, "sub/a.txt", []byte("alpha"), 0))
	if b, err := os.ReadFile(filepath.Join(dir, "sub/a.txt")); err != nil || string(b) != "alpha" {
		t.Fatalf("relative to the workdir: %q %v", b, err)
	}
	// An absolute link, like /etc/alternatives/x -> /usr/bin/x.
	must(t, os.Symlink(filepath.Join(dir, "sub/a.txt"), filepath.Join(dir, "abs")))
	if data, err := e.c.ReadFile(ctx, filepath.Join(dir, "abs")); err != nil || string(data) != "alpha" {
		t.Errorf("ReadFile through an absolute link: %q %v", data, err)
	}
	must(t, e.c.WriteFile(ctx, filepath.Join(dir, "abs"), []byte("beta"), 0))
	if b, _ := os.ReadFile(filepath.Join(dir, "sub/a.txt")); string(b) != "beta" {
		t.Errorf("WriteFile through an absolute link wrote %q to the target", b)
	}
	if n, err := e.c.EditFile(ctx, "abs", "beta", "gamma", false); err != nil || n != 1 {
		t.Errorf("EditFile through an absolute link: %d %v", n, err)
	}
	info, err := e.c.Stat(ctx, "abs")
	if err != nil || info.Path != filepath.Join(dir, "abs") || info.SymlinkTarget != filepath.Join(dir, "sub/a.txt") {
		t.Errorf("Stat = %v, %v", info, err)
	}
	var buf bytes.Buffer
	if _, err := e.c.Download(ctx, "abs", &buf); err != nil {
		t.Fatalf("Download of an absolute link: %v", err)
	}
	tr := tar.NewReader(&buf)
	if h, err := tr.Next(); err != nil || h.Name != "abs" || h.Size != 5 {
		t.Errorf("the download follows the link: %v %v", h, err)
	}
	if _, err := e.c.CopyTo(ctx, filepath.Join(dir, "sub"), filepath.Join(dir, "copy")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "copy/sub/a.txt")); string(b) != "gamma" {
		t.Errorf("uploaded %q", b)
	}
	out, _, _ := e.sh("pwd")
	if out != dir+"\n" {
		t.Errorf("processes start in the workdir: %q", out)
	}
	_, err = e.c.ReadFile(ctx, strings.Repeat("../", 50)+"etc/hostname")
	wantKind(t, err, errdefs.ErrPermissionDenied, "leaves the sandbox's root")
	paths, _, err := e.c.Glob(ctx, "**/*.txt", "")
	if err != nil || !slices.Equal(paths, []string{filepath.Join(dir, "copy/sub/a.txt"), filepath.Join(dir, "sub/a.txt")}) {
		t.Errorf("Glob = %v %v", paths, err)
	}
}
