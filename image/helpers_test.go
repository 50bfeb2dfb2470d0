package image

import (
	"archive/tar"
	"bytes"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// requiresRoot: the test mounts overlayfs, sets trusted.* xattrs, chowns.
func requiresRoot(t testing.TB) {
	t.Helper()
	testenv.RequiresRoot(t)
}

// tf is one tar entry of a test layer.
type tf struct {
	name     string
	typ      byte // tar.TypeReg if 0
	mode     int64
	body     string
	link     string
	uid, gid int
	xattrs   map[string]string
	major    int64 // of a device node
	minor    int64
}

var testTime = time.Unix(1700000000, 0)

func tarBytes(t testing.TB, entries ...tf) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{
			Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link,
			Uid: e.uid, Gid: e.gid, ModTime: testTime, Format: tar.FormatPAX,
			Devmajor: e.major, Devminor: e.minor,
		}
		if hdr.Typeflag == 0 {
			hdr.Typeflag = tar.TypeReg
		}
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
			if hdr.Typeflag == tar.TypeDir {
				hdr.Mode = 0o755
			}
		}
		if hdr.Typeflag == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		for k, v := range e.xattrs {
			if hdr.PAXRecords == nil {
				hdr.PAXRecords = map[string]string{}
			}
			hdr.PAXRecords["SCHILY.xattr."+k] = v
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func layerOf(t testing.TB, b []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// The test image: the lower layer has files, a directory, a symlink, a
// hard link and an xattr; the upper one deletes a lower file and
// makes a directory opaque.
func lowerLayer(t testing.TB) []byte {
	return tarBytes(t,
		tf{name: "etc/", typ: tar.TypeDir},
		tf{name: "etc/hello", body: "hello\n"},
		tf{name: "data/", typ: tar.TypeDir, mode: 0o750, uid: 1000, gid: 1000},
		tf{name: "data/a", mode: 0o600, body: "a", uid: 1000, gid: 1000},
		tf{name: "data/setuid", mode: 0o4755, body: "#!/bin/sh\n"},
		tf{name: "link", typ: tar.TypeSymlink, link: "etc/hello"},
		tf{name: "hard", typ: tar.TypeLink, link: "etc/hello"},
		tf{name: "gone", body: "bye"},
		tf{name: "opq/", typ: tar.TypeDir},
		tf{name: "opq/old", body: "old"},
		tf{name: "xattr", body: "x", xattrs: map[string]string{"user.reins": "yes"}},
	)
}

func upperLayer(t testing.TB) []byte {
	return tarBytes(t,
		tf{name: ".wh.gone"},
		tf{name: "opq/", typ: tar.TypeDir},
		tf{name: "opq/.wh..wh..opq"},
		tf{name: "opq/new", body: "new"},
		tf{name: "etc/", typ: tar.TypeDir},
		tf{name: "etc/added", body: "added"},
	)
}

func testImage(t testing.TB, layers ...[]byte) v1.Image {
	t.Helper()
	if len(layers) == 0 {
		layers = [][]byte{lowerLayer(t), upperLayer(t)}
	}
	img := empty.Image
	for _, b := range layers {
		var err error
		if img, err = mutate.AppendLayers(img, layerOf(t, b)); err != nil {
			t.Fatal(err)
		}
	}
	img, err := mutate.Config(img, v1.Config{Env: []string{"GREETING=hi"}, Cmd: []string{"/bin/sh"}})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// testRegistry is an in-process registry that counts what it is asked.
type testRegistry struct {
	srv  *httptest.Server
	host string

	mu        sync.Mutex
	requests  int
	blobGets  map[string]int  // by digest
	breakBlob map[string]bool // cut downloads of these blobs off half way
}

func newTestRegistry(t testing.TB) *testRegistry {
	t.Helper()
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	tr := &testRegistry{blobGets: map[string]int{}}
	tr.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr.mu.Lock()
		tr.requests++
		isBlob := r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/")
		if isBlob {
			tr.blobGets[path.Base(r.URL.Path)]++
		}
		breakBlob := isBlob && tr.breakBlob[path.Base(r.URL.Path)]
		tr.mu.Unlock()
		if breakBlob {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			body := rec.Body.Bytes()
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.WriteHeader(rec.Code)
			w.Write(body[:len(body)/2])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		tr.srv.CloseClientConnections()
		tr.srv.Close()
	})
	tr.host = strings.TrimPrefix(tr.srv.URL, "http://")
	return tr
}

func (tr *testRegistry) push(t testing.TB, repoTag string, img v1.Image) string {
	t.Helper()
	ref := tr.host + "/" + repoTag
	n, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	tp := remote.DefaultTransport.(*http.Transport).Clone()
	defer tp.CloseIdleConnections()
	if err := remote.Write(n, img, remote.WithTransport(tp)); err != nil {
		t.Fatal(err)
	}
	return ref
}

func (tr *testRegistry) count() (requests int, blobGets map[string]int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	m := make(map[string]int, len(tr.blobGets))
	for k, v := range tr.blobGets {
		m[k] = v
	}
	return tr.requests, m
}

func newStore(t testing.TB, opts ...Option) *Store {
	t.Helper()
	s, err := NewStore(t.TempDir(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.CloseIdleConnections)
	return s
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func lstat(t testing.TB, p string) *unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// mountOverlay mounts the layers (lowest first) read-only and returns the
// merged directory.
func mountOverlay(t testing.TB, layers []string) string {
	t.Helper()
	requiresRoot(t)
	merged := filepath.Join(t.TempDir(), "merged")
	if err := os.Mkdir(merged, 0o755); err != nil {
		t.Fatal(err)
	}
	lower := make([]string, len(layers))
	for i, l := range layers {
		lower[len(layers)-1-i] = l
	}
	if len(lower) == 1 {
		// overlayfs wants two layers when it has no upper one.
		empty := t.TempDir()
		lower = append(lower, empty)
	}
	if err := unix.Mount("overlay", merged, "overlay", unix.MS_RDONLY, "lowerdir="+strings.Join(lower, ":")); err != nil {
		t.Fatalf("mount overlay: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(merged, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return merged
}
