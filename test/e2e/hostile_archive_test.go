package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/api/reins/executor/v1/executorv1connect"
)

// TestHostileImageLayer is finding 5 of issue 7: an image layer that carries
// a block device node (254:0, the host's root disk, mode 0666) must fail
// sandbox create, naming the entry, and leave no device node anywhere under
// the data dir.
func TestHostileImageLayer(t *testing.T) {
	s := startService(t)
	layerTar := tarOf(t,
		&tar.Header{Name: "dev/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "dev/sda", Typeflag: tar.TypeBlock, Mode: 0o666, Devmajor: 254, Devminor: 0},
	)
	dir := ociLayout(t, layerTar)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			r := s.run("sandbox", "create", "--backend", backend, "--image", "oci:"+dir)
			if r.code == 0 {
				t.Fatalf("create from a layer with a block device succeeded: %s", r)
			}
			want := `entry "dev/sda" is a block device (254:0): images and archives may not carry device nodes, fifos or sockets`
			if !strings.Contains(r.stderr, want) {
				t.Errorf("create: %s\nwant the error to say %q", r, want)
			}
			noDeviceNodes(t, s.dataDir)
		})
	}
}

// noDeviceNodes fails if a block device, a character device other than an
// overlayfs whiteout (0:0) or a fifo is anywhere under dir.
func noDeviceNodes(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type()&fs.ModeDevice != 0 || d.Type()&fs.ModeNamedPipe != 0 {
			fi, err := os.Lstat(p)
			if err == nil && fi.Mode()&fs.ModeCharDevice != 0 && rdev(fi) == 0 {
				return nil // a whiteout
			}
			t.Errorf("%s is a %v", p, d.Type())
		}
		return nil
	})
}

func rdev(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Rdev
	}
	return 1
}

// TestCopyOutOfSandboxWithSpecialFiles copies a directory holding a fifo,
// a device node (where the backend lets root make one), symbolic links
// that point out and a hard link out of a real sandbox: the local copy has
// no fifo or device, its links are links (never followed), and nothing is
// written outside the destination.
func TestCopyOutOfSandboxWithSpecialFiles(t *testing.T) {
	s := startService(t)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			id := s.create("--backend", backend)
			s.must("sandbox", "exec", id, "--", "sh", "-c", `set -e
				mkdir -p /workspace/x/sub
				echo hi > /workspace/x/f
				ln /workspace/x/f /workspace/x/hard
				mkfifo /workspace/x/p
				mknod /workspace/x/blk b 254 0 2>/dev/null || true
				ln -s /etc/passwd /workspace/x/abs
				ln -s ../../../../../../../../tmp /workspace/x/rel
				ln -s .. /workspace/x/sub/up`)
			parent := t.TempDir()
			dst := filepath.Join(parent, "dst")
			if err := os.Mkdir(dst, 0o755); err != nil {
				t.Fatal(err)
			}
			s.must("sandbox", "cp", id+":/workspace/x", dst)
			if b, err := os.ReadFile(filepath.Join(dst, "x/f")); string(b) != "hi\n" {
				t.Errorf("x/f = %q, %v", b, err)
			}
			for link, target := range map[string]string{"abs": "/etc/passwd", "rel": "../../../../../../../../tmp", "sub/up": ".."} {
				if got, err := os.Readlink(filepath.Join(dst, "x", link)); got != target {
					t.Errorf("x/%s -> %q (%v), want the link kept as a link to %q", link, got, err, target)
				}
			}
			for _, gone := range []string{"p", "blk"} {
				if fi, err := os.Lstat(filepath.Join(dst, "x", gone)); err == nil {
					t.Errorf("x/%s was copied: %v", gone, fi.Mode())
				}
			}
			noDeviceNodes(t, parent)
			if ents, _ := os.ReadDir(parent); len(ents) != 1 {
				t.Errorf("something was written beside the destination: %v", ents)
			}
			s.must("sandbox", "rm", id)
		})
	}
}

// TestCopyOutOfHostileExecutor runs the real CLI against an executor that
// lies: it answers Download with forged tar streams. Each must be refused
// with a message naming the entry, and nothing may be written outside the
// destination or through a link.
func TestCopyOutOfHostileExecutor(t *testing.T) {
	parent := t.TempDir()
	outside := filepath.Join(parent, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	// The user copies into a directory of theirs that holds other files.
	dst := filepath.Join(parent, "dst")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}

	fe := &fakeExecutor{}
	mux := http.NewServeMux()
	mux.Handle(executorv1connect.NewExecutorHandler(fe))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols) // the CLI speaks HTTP/2 without TLS, and HTTP/1.1
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()
	s := &service{t: t, url: srv.URL, token: "fake"}

	reg := func(name, body string) *tar.Header {
		return &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}
	}
	for _, tc := range []struct {
		name    string
		entries []*tar.Header
		says    string
	}{
		{"a link to the directory copied into, then a file through it",
			[]*tar.Header{{Name: "x/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "x/up", Typeflag: tar.TypeSymlink, Linkname: ".."}, reg("x/up/victim", "pwned")},
			`entry "x/up/victim" is beneath "x/up", a symbolic link`},
		{"an absolute link, then a file through it",
			[]*tar.Header{{Name: "x/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "x/out", Typeflag: tar.TypeSymlink, Linkname: outside}, reg("x/out/planted", "pwned")},
			`entry "x/out/planted" is beneath "x/out", a symbolic link`},
		{"a hard link to a file of the directory copied into, then written",
			[]*tar.Header{{Name: "x/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "x/h", Typeflag: tar.TypeLink, Linkname: "victim"}, reg("x/h", "pwned")},
			`entry "x/h" is a hard link to "victim", which no earlier entry of the archive made`},
		{"a hard link out", []*tar.Header{{Name: "x/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "x/h", Typeflag: tar.TypeLink, Linkname: "../../victim"}},
			`entry "x/h" is a hard link to "../../victim", outside the destination`},
		{"a block device", []*tar.Header{{Name: "x/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "x/sda", Typeflag: tar.TypeBlock, Mode: 0o666, Devmajor: 254}},
			`entry "x/sda" is a block device (254:0): images and archives may not carry device nodes, fifos or sockets`},
		{"a fifo", []*tar.Header{{Name: "x/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "x/p", Typeflag: tar.TypeFifo, Mode: 0o666}},
			`entry "x/p" is a fifo: images and archives may not carry device nodes, fifos or sockets`},
		{"a size past the cap", []*tar.Header{{Name: "x", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1 << 40}},
			`entry "x" claims 1099511627776 bytes, which would take the archive past its cap`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fe.tar = forgedTar(t, tc.entries...)
			os.RemoveAll(filepath.Join(dst, "x"))
			if err := os.WriteFile(filepath.Join(dst, "victim"), []byte("safe"), 0o644); err != nil {
				t.Fatal(err)
			}
			r := s.run("sandbox", "cp", "fake:/workspace/x", dst)
			if r.code == 0 || !strings.Contains(r.stderr, tc.says) {
				t.Errorf("cp: %s\nwant it to fail saying %q", r, tc.says)
			}
			if b, _ := os.ReadFile(filepath.Join(dst, "victim")); string(b) != "safe" {
				t.Errorf("the user's file beside the copy is now %q", b)
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Errorf("files appeared outside the destination: %v", ents)
			}
			noDeviceNodes(t, parent)
		})
	}
}

// fakeExecutor answers Stat with a directory and Download with tar.
type fakeExecutor struct {
	executorv1connect.UnimplementedExecutorHandler
	tar []byte
}

func (f *fakeExecutor) Stat(_ context.Context, req *connect.Request[executorv1.StatRequest]) (*connect.Response[executorv1.StatResponse], error) {
	return connect.NewResponse(&executorv1.StatResponse{Info: &executorv1.FileInfo{
		Path: req.Msg.Path, Name: filepath.Base(req.Msg.Path), Type: executorv1.FileType_FILE_TYPE_DIR, Mode: 0o755,
	}}), nil
}

func (f *fakeExecutor) Download(_ context.Context, _ *connect.Request[executorv1.DownloadRequest], stream *connect.ServerStream[executorv1.DownloadResponse]) error {
	sum := sha256.Sum256(f.tar)
	if err := stream.Send(&executorv1.DownloadResponse{Data: f.tar}); err != nil {
		return err
	}
	return stream.Send(&executorv1.DownloadResponse{Sha256: hex.EncodeToString(sum[:])})
}

// forgedTar writes the headers as given, each regular file with "pwned"
// padded to its size, and stops inside an entry that claims more than
// 1 MiB (as a lying header does).
func forgedTar(t *testing.T, hdrs ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		h.ModTime = time.Unix(1700000000, 0)
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if h.Size > 1<<20 {
				return buf.Bytes()
			}
			io.WriteString(tw, strings.Repeat("pwned", int(h.Size))[:h.Size])
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func tarOf(t *testing.T, hdrs ...*tar.Header) []byte {
	t.Helper()
	return forgedTar(t, hdrs...)
}

// ociLayout writes an OCI image layout with one image of the given
// layers and returns its directory.
func ociLayout(t *testing.T, layers ...[]byte) string {
	t.Helper()
	var img v1.Image = empty.Image
	for _, b := range layers {
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	return dir
}
