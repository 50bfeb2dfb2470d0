package image

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/errdefs"
)

func TestPullUnpackAndMount(t *testing.T) {
	reg := newTestRegistry(t)
	ref := reg.push(t, "test/img:v1", testImage(t))
	s := newStore(t)

	var mu sync.Mutex
	finished := map[string]bool{}
	img, err := s.Resolve(context.Background(), ref, func(p Progress) {
		mu.Lock()
		defer mu.Unlock()
		if p.Phase != PhasePull {
			t.Errorf("phase %q, want %q", p.Phase, PhasePull)
		}
		if p.Total > 0 && p.Done == p.Total {
			finished[p.Layer] = true
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(finished) != 2 {
		t.Errorf("progress finished %d layers, want 2: %v", len(finished), finished)
	}
	if img.Ref != ref || !strings.HasPrefix(img.Digest, "sha256:") || len(img.Layers) != 2 {
		t.Fatalf("image = %+v", img)
	}
	if img.Config.WorkingDir != DefaultWorkingDir || !slices.Equal(img.Config.Cmd, []string{"/bin/sh"}) ||
		!slices.Contains(img.Config.Env, "GREETING=hi") || !slices.Contains(img.Config.Env, DefaultPath) {
		t.Errorf("config = %+v", img.Config)
	}
	if img.Size <= 0 {
		t.Errorf("size = %d", img.Size)
	}
	for _, l := range img.Layers {
		if !filepath.IsAbs(l) || !strings.HasPrefix(l, filepath.Join(s.Dir(), "layers", "sha256")) {
			t.Errorf("layer dir %s not under the store", l)
		}
	}
	lower, upper := img.Layers[0], img.Layers[1]

	// The lower layer, as written.
	if got := readFile(t, filepath.Join(lower, "etc/hello")); got != "hello\n" {
		t.Errorf("etc/hello = %q", got)
	}
	if st := lstat(t, filepath.Join(lower, "data")); st.Mode != unix.S_IFDIR|0o750 || (os.Geteuid() == 0 && (st.Uid != 1000 || st.Gid != 1000)) {
		t.Errorf("data: mode %o uid %d gid %d", st.Mode, st.Uid, st.Gid)
	}
	if st := lstat(t, filepath.Join(lower, "data/setuid")); st.Mode&0o7777 != 0o4755 {
		t.Errorf("data/setuid mode %o", st.Mode&0o7777)
	}
	if st := lstat(t, filepath.Join(lower, "etc/hello")); st.Mtim.Sec != testTime.Unix() {
		t.Errorf("etc/hello mtime %d, want %d", st.Mtim.Sec, testTime.Unix())
	}
	if st := lstat(t, filepath.Join(lower, "etc")); st.Mtim.Sec != testTime.Unix() {
		t.Errorf("etc mtime %d, want %d", st.Mtim.Sec, testTime.Unix())
	}
	if target, err := os.Readlink(filepath.Join(lower, "link")); err != nil || target != "etc/hello" {
		t.Errorf("link -> %q, %v", target, err)
	}
	if a, b := lstat(t, filepath.Join(lower, "hard")), lstat(t, filepath.Join(lower, "etc/hello")); a.Ino != b.Ino {
		t.Errorf("hard is not a hard link of etc/hello")
	}
	buf := make([]byte, 16)
	if n, err := unix.Lgetxattr(filepath.Join(lower, "xattr"), "user.reins", buf); err != nil || string(buf[:n]) != "yes" {
		t.Errorf("xattr user.reins = %q, %v", buf[:n], err)
	}

	// The upper layer, in overlayfs form.
	if st := lstat(t, filepath.Join(upper, "gone")); st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("gone is not a whiteout: mode %o rdev %d", st.Mode, st.Rdev)
	}
	if exists(filepath.Join(upper, ".wh.gone")) || exists(filepath.Join(upper, "opq/.wh..wh..opq")) {
		t.Errorf("OCI whiteout files left in the layer")
	}
	if os.Geteuid() == 0 {
		if n, err := unix.Lgetxattr(filepath.Join(upper, "opq"), opaqueXattr, buf); err != nil || string(buf[:n]) != "y" {
			t.Errorf("opq: %s = %q, %v", opaqueXattr, buf[:n], err)
		}
	}

	// The merged view hides what the upper layer deleted.
	merged := mountOverlay(t, img.Layers)
	for _, p := range []string{"gone", "opq/old"} {
		if exists(filepath.Join(merged, p)) {
			t.Errorf("%s is visible in the merged view", p)
		}
	}
	for p, want := range map[string]string{"etc/hello": "hello\n", "etc/added": "added", "opq/new": "new", "link": "hello\n", "hard": "hello\n"} {
		if got := readFile(t, filepath.Join(merged, p)); got != want {
			t.Errorf("merged %s = %q, want %q", p, got, want)
		}
	}
	ents, err := os.ReadDir(filepath.Join(merged, "opq"))
	if err != nil || len(ents) != 1 || ents[0].Name() != "new" {
		t.Errorf("merged opq/ = %v, %v; want just new", ents, err)
	}
}

func TestResolveIsCached(t *testing.T) {
	reg := newTestRegistry(t)
	ref := reg.push(t, "test/img:v1", testImage(t))
	s := newStore(t)
	ctx := context.Background()
	first, err := s.Resolve(ctx, ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := reg.count()

	// Again, from this store and from another one on the same directory
	// (another process, say): no request reaches the registry.
	again, err := s.Resolve(ctx, ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := NewStore(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	byDigest, err := s2.Resolve(ctx, reg.host+"/test/img@"+first.Digest, nil)
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := reg.count(); after != before {
		t.Errorf("registry requests went from %d to %d", before, after)
	}
	if !slices.Equal(again.Layers, first.Layers) || !slices.Equal(byDigest.Layers, first.Layers) || byDigest.Digest != first.Digest {
		t.Errorf("cached images differ: %+v %+v %+v", first, again, byDigest)
	}
}

func TestConcurrentResolveUnpacksOnce(t *testing.T) {
	reg := newTestRegistry(t)
	img := testImage(t)
	refs := []string{reg.push(t, "test/img:a", img), reg.push(t, "test/img:b", img), reg.push(t, "other/img:c", img)}
	s := newStore(t)

	var wg sync.WaitGroup
	results := make([]*Image, 6)
	errs := make([]error, 6)
	for i := range results {
		wg.Go(func() {
			results[i], errs[i] = s.Resolve(context.Background(), refs[i%len(refs)], nil)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("resolve %d: %v", i, err)
		}
		if !slices.Equal(results[i].Layers, results[0].Layers) {
			t.Errorf("resolve %d: layers %v, want %v", i, results[i].Layers, results[0].Layers)
		}
	}
	layers, _ := img.Layers()
	_, gets := reg.count()
	for _, l := range layers {
		d, _ := l.Digest()
		if n := gets[d.String()]; n != 1 {
			t.Errorf("layer %s fetched %d times, want 1", d, n)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(s.Dir(), "tmp"))
	if len(ents) != 0 {
		t.Errorf("tmp not empty: %v", ents)
	}
}

func TestRegistryErrors(t *testing.T) {
	reg := newTestRegistry(t)
	reg.push(t, "test/img:v1", testImage(t))
	s := newStore(t)
	for _, tc := range []struct {
		ref, answer string
	}{
		{reg.host + "/test/img:nosuch", "MANIFEST_UNKNOWN"},
		{reg.host + "/nosuch/repo:1", "NAME_UNKNOWN"},
	} {
		_, err := s.Resolve(context.Background(), tc.ref, nil)
		if !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%s: error %v, want ErrNotFound", tc.ref, err)
			continue
		}
		want := `image "` + tc.ref + `": registry ` + reg.host + ` answered: ` + tc.answer
		if !strings.HasPrefix(err.Error(), want) {
			t.Errorf("error %q, want it to start with %q", err, want)
		}
	}
}

func TestRegistryUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := l.Addr().String()
	l.Close()
	s := newStore(t)
	_, err = s.Resolve(context.Background(), host+"/x/y:z", nil)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "registry "+host+" is unreachable") {
		t.Errorf("error %v, want ErrUnavailable naming %s", err, host)
	}
}

func TestRegistryBreaksOff(t *testing.T) {
	reg := newTestRegistry(t)
	img := testImage(t)
	ref := reg.push(t, "test/img:v1", img)
	layers, _ := img.Layers()
	d, _ := layers[1].Digest()
	reg.mu.Lock()
	reg.breakBlob = map[string]bool{d.String(): true}
	reg.mu.Unlock()
	s := newStore(t, func(o *options) { o.retry = &remote.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 2} })
	_, err := s.Resolve(context.Background(), ref, nil)
	t.Log(err)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), reg.host) {
		t.Errorf("error %v, want ErrUnavailable naming %s", err, reg.host)
	}
	if ents, _ := os.ReadDir(filepath.Join(s.Dir(), "tmp")); len(ents) != 0 {
		t.Errorf("tmp not empty: %v", ents)
	}
	ents, _ := filepath.Glob(filepath.Join(s.Dir(), "layers/sha256/*"))
	if len(ents) > 2 { // the good layer and its record may be there
		t.Errorf("layers: %v", ents)
	}
}

func TestPlainHTTPOnlyForLoopback(t *testing.T) {
	s := newStore(t, WithInsecureRegistries("reg.internal:5000"))
	for host, want := range map[string]bool{
		"127.0.0.1:5000": true, "127.1.2.3": true, "localhost:5000": true, "[::1]:5000": true,
		"reg.internal:5000": true, "reg.internal:5001": false,
		"10.0.0.1:5000": false, "192.168.1.1": false, "registry.example.com": false,
	} {
		if got := s.insecure(host); got != want {
			t.Errorf("insecure(%q) = %v, want %v", host, got, want)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, "http://10.0.0.1:5000/v2/", nil)
	if _, err := s.transport.RoundTrip(req); err == nil || !strings.Contains(err.Error(), "plain HTTP to 10.0.0.1:5000 refused") {
		t.Errorf("plain HTTP to a private address: %v", err)
	}
}

func TestMaliciousLayerRefused(t *testing.T) {
	reg := newTestRegistry(t)
	ref := reg.push(t, "evil/img:1", testImage(t, tarBytes(t,
		tf{name: "ok", body: "fine"},
		tf{name: "../x", body: "escaped"},
	)))
	s := newStore(t)
	_, err := s.Resolve(context.Background(), ref, nil)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `"../x"`) {
		t.Fatalf("error %v, want ErrInvalidArgument naming ../x", err)
	}
	for _, d := range []string{"tmp", "layers/sha256"} {
		if ents, _ := os.ReadDir(filepath.Join(s.Dir(), d)); len(ents) != 0 {
			t.Errorf("%s not empty: %v", d, ents)
		}
	}
	if exists(filepath.Join(s.Dir(), "x")) || exists(filepath.Join(s.Dir(), "tmp", "x")) {
		t.Errorf("../x was written")
	}
}
