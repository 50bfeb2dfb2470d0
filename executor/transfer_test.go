package executor_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/archive"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor"
	"github.com/reinsdev/reins/internal/testenv"
)

// makeTree makes a small tree with the kinds of things a workspace has.
func makeTree(t *testing.T, dir string) {
	t.Helper()
	write := func(p, content string, mode os.FileMode) {
		p = filepath.Join(dir, p)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(content), mode))
		must(t, os.Chmod(p, mode))
	}
	write("a.txt", "alpha\n", 0o644)
	write("bin/run.sh", "#!/bin/sh\necho run\n", 0o755)
	write("secret", "s", 0o600)
	write("deep/x/y/z.txt", "zzz", 0o644)
	big := make([]byte, 3<<20+17)
	rand.NewChaCha8([32]byte{1}).Read(big)
	write("big.bin", string(big), 0o644)
	must(t, os.Mkdir(filepath.Join(dir, "empty"), 0o700))
	must(t, os.Symlink("a.txt", filepath.Join(dir, "lnk")))
	must(t, os.Symlink("/etc/passwd", filepath.Join(dir, "abs"))) // stored, never followed
	must(t, os.Symlink("bin", filepath.Join(dir, "dirlink")))
}

// compareTrees fails unless b has what a has: types, permissions, contents
// and link targets.
func compareTrees(t *testing.T, a, b string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(a, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(a, p)
		fa, err := os.Lstat(p)
		if err != nil {
			return err
		}
		fb, err := os.Lstat(filepath.Join(b, rel))
		if err != nil {
			t.Errorf("%s: missing in the copy: %v", rel, err)
			return nil
		}
		n++
		if fa.Mode() != fb.Mode() {
			t.Errorf("%s: mode %v, copy %v", rel, fa.Mode(), fb.Mode())
		}
		switch {
		case fa.Mode().IsRegular():
			ca, _ := os.ReadFile(p)
			cb, _ := os.ReadFile(filepath.Join(b, rel))
			if !bytes.Equal(ca, cb) {
				t.Errorf("%s: content differs", rel)
			}
			if !fa.ModTime().Truncate(time.Second).Equal(fb.ModTime()) {
				t.Errorf("%s: mtime %v, copy %v", rel, fa.ModTime(), fb.ModTime())
			}
		case fa.Mode()&fs.ModeSymlink != 0:
			la, _ := os.Readlink(p)
			lb, _ := os.Readlink(filepath.Join(b, rel))
			if la != lb {
				t.Errorf("%s: link to %q, copy to %q", rel, la, lb)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Errorf("compared only %d entries", n)
	}
}

func tarOf(t *testing.T, src string) []byte {
	t.Helper()
	var buf bytes.Buffer
	must(t, archive.Write(&buf, src))
	return buf.Bytes()
}

func TestUploadDownloadRoundTrip(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	src := filepath.Join(t.TempDir(), "tree")
	makeTree(t, src)
	stream := tarOf(t, src)
	resp, err := e.c.Upload(ctx, "/up", bytes.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(stream)
	if resp.Sha256 != hex.EncodeToString(sum[:]) || resp.Files != 8 || resp.Bytes != 3<<20+17+6+19+1+3 {
		t.Errorf("Upload = %v", resp)
	}
	compareTrees(t, src, e.host("up/tree"))

	var down bytes.Buffer
	got, err := e.c.Download(ctx, "/up/tree", &down)
	if err != nil {
		t.Fatal(err)
	}
	if s := sha256.Sum256(down.Bytes()); got != hex.EncodeToString(s[:]) {
		t.Errorf("Download sha256 %s, stream has %x", got, s)
	}
	local := t.TempDir()
	if _, _, err := archive.Extract(&down, local); err != nil {
		t.Fatal(err)
	}
	compareTrees(t, src, filepath.Join(local, "tree"))

	// The helpers that wrap both ends.
	if _, err := e.c.CopyTo(ctx, src, "/copy"); err != nil {
		t.Fatal(err)
	}
	compareTrees(t, src, e.host("copy/tree"))
	back := t.TempDir()
	if _, _, err := e.c.CopyFrom(ctx, "/copy/tree", back); err != nil {
		t.Fatal(err)
	}
	compareTrees(t, src, filepath.Join(back, "tree"))

	// One file: a tar with one entry named after it.
	down.Reset()
	if _, err := e.c.Download(ctx, "/up/tree/a.txt", &down); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&down)
	h, err := tr.Next()
	if err != nil || h.Name != "a.txt" || h.Size != 6 {
		t.Errorf("single-file tar: %v %v", h, err)
	}
	_, err = e.c.Download(ctx, "/none", io.Discard)
	wantKind(t, err, errdefs.ErrNotFound)
}

// TestUploadStreamsToDisk sends 200 MiB and checks that the heap stays far
// below that: nothing holds the stream in memory.
func TestUploadStreamsToDisk(t *testing.T) {
	e := newEnv(t)
	const size = 200 << 20
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		tw.WriteHeader(&tar.Header{Name: "big", Mode: 0o644, Size: size, Typeflag: tar.TypeReg})
		chunk := make([]byte, 256<<10)
		for i := 0; i < size/len(chunk); i++ {
			tw.Write(chunk)
		}
		pw.CloseWithError(tw.Close())
	}()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.HeapInuse
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
		}
	})
	resp, err := e.c.Upload(ctxT(t), "/", pr)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if resp.Bytes != size {
		t.Errorf("wrote %d bytes", resp.Bytes)
	}
	if fi, err := os.Stat(e.host("big")); err != nil || fi.Size() != size {
		t.Fatalf("big: %v %v", fi, err)
	}
	growth := int64(peak.Load()) - int64(before)
	t.Logf("heap in use: %d MiB before, peak %d MiB during a 200 MiB upload", before>>20, peak.Load()>>20)
	if growth > 64<<20 {
		t.Errorf("the heap grew by %d MiB during a 200 MiB upload", growth>>20)
	}
}

func maliciousTar(t *testing.T, entries ...*tar.Header) io.Reader {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		if h.Typeflag == tar.TypeReg {
			h.Size = 4
		}
		must(t, tw.WriteHeader(h))
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte("evil"))
		}
	}
	must(t, tw.Close())
	return &buf
}

func TestUploadRefusesMaliciousTars(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	reg := func(name string) *tar.Header { return &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644} }
	link := func(name, target string) *tar.Header {
		return &tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}
	}
	for _, tc := range []struct {
		name    string
		entries []*tar.Header
		says    string
	}{
		{"dotdot", []*tar.Header{reg("../evil")}, `"../evil"`},
		{"dotdot inside", []*tar.Header{reg("a/../../evil")}, `"a/../../evil"`},
		{"absolute", []*tar.Header{reg("/evil")}, `"/evil" has an absolute name`},
		{"absolute link", []*tar.Header{link("l", "/"), reg("l/tmp/evil")}, `"l/tmp/evil"`},
		{"relative link", []*tar.Header{link("l", "../../../.."), reg("l/evil")}, `"l/evil"`},
		{"link to a dir then file", []*tar.Header{link("d", e.root+"/.."), reg("d/evil")}, `"d/evil"`},
		{"device", []*tar.Header{{Name: "dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}}, `"dev" is a character device (1:3): images and archives may not carry device nodes`},
		{"fifo", []*tar.Header{{Name: "fifo", Typeflag: tar.TypeFifo}}, `"fifo" is a fifo: images and archives may not carry`},
		{"hard link out", []*tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"}}, `"h"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.c.Upload(ctx, "/up/"+strings.ReplaceAll(tc.name, " ", "-"), maliciousTar(t, tc.entries...))
			wantKind(t, err, errdefs.ErrInvalidArgument, tc.says, "refusing")
		})
	}
	for _, p := range []string{filepath.Dir(e.root) + "/evil", "/tmp/evil", "/evil", e.root + "/evil"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was written", p)
		}
	}
}

func TestDiskFull(t *testing.T) {
	testenv.RequiresRoot(t) // to mount a small tmpfs
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mounting a tmpfs as root: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	e := newEnv(t, func(c *executor.Config) { c.Root = dir })
	ctx := ctxT(t)

	err := e.c.WriteFile(ctx, "/big", make([]byte, 2<<20), 0)
	wantKind(t, err, errdefs.ErrNoSpace, "no space left on the sandbox's disk while writing /big", "--disk")
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left behind: %v", entries)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "sub/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "sub/big", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2 << 20})
	tw.Write(make([]byte, 2<<20))
	tw.Close()
	_, err = e.c.Upload(ctx, "/up", &buf)
	wantKind(t, err, errdefs.ErrNoSpace, "while writing /up/sub/big")
	if _, err := os.Stat(filepath.Join(dir, "up/sub/big")); !os.IsNotExist(err) {
		t.Errorf("the partial file is still there: %v", err)
	}
	// The executor keeps working.
	if err := e.c.WriteFile(ctx, "/small", []byte("ok"), 0); err != nil {
		t.Fatal(err)
	}
	if out, _, _ := e.sh("echo ok"); out != "ok\n" {
		t.Errorf("exec after a full disk: %q", out)
	}
}

// TestConcurrentTransfers moves different data both ways at once: pooled
// buffers must never be shared by two transfers.
func TestConcurrentTransfers(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			data := make([]byte, 1<<20+i*4099)
			rand.NewChaCha8([32]byte{byte(i)}).Read(data)
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			tw.WriteHeader(&tar.Header{Name: "f", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data))})
			tw.Write(data)
			tw.Close()
			dir := fmt.Sprintf("/c%d", i)
			for range 3 {
				if _, err := e.c.Upload(ctx, dir, bytes.NewReader(buf.Bytes())); err != nil {
					t.Error(err)
					return
				}
				var down bytes.Buffer
				if _, err := e.c.Download(ctx, dir+"/f", &down); err != nil {
					t.Error(err)
					return
				}
				tr := tar.NewReader(&down)
				if _, err := tr.Next(); err != nil {
					t.Error(err)
					return
				}
				got, _ := io.ReadAll(tr)
				if !bytes.Equal(got, data) {
					t.Errorf("transfer %d: the data came back different", i)
					return
				}
			}
		})
	}
	wg.Wait()
}
