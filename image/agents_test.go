package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/internal/testenv"
)

// TestAgents builds the agents image from the real npm registry, keeping
// the tarballs and the unpacked packages in the operator's build cache
// (DefaultBuildCache), where the first run on a machine downloads them
// (about 360 MB) and every later run copies them. The debian image under
// it comes from the same cache (or is built once). Both programs run in a
// gVisor sandbox in the e2e tests (TestAgentsImage).
func TestAgents(t *testing.T) {
	requiresRoot(t)
	testenv.RequiresBinary(t, "debootstrap", "debootstrap")
	s := newStore(t, WithBuildCache(DefaultBuildCache))
	var downloads, installed int
	var last Progress
	start := time.Now()
	img, err := s.Resolve(context.Background(), "agents", func(p Progress) {
		switch {
		case strings.HasPrefix(p.Message, "downloading "):
			downloads++
			last = p
		case strings.HasPrefix(p.Message, "installed "):
			installed++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("agents %s: %d MiB in %d layers, built in %v (%d download reports)",
		img.Digest, img.Size>>20, len(img.Layers), time.Since(start).Round(time.Millisecond), downloads)
	if downloads > 0 && (last.Total == 0 || last.Done != last.Total) {
		t.Errorf("the last download report %+v does not reach its total", last)
	}
	if installed != len(agentPackages) {
		t.Errorf("%d packages reported installed, want %d", installed, len(agentPackages))
	}
	debian, err := s.Resolve(context.Background(), "debian", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Layers) != 2 || img.Layers[0] != debian.Layers[0] {
		t.Fatalf("layers %v, want debian's %v and one more", img.Layers, debian.Layers)
	}
	top := img.Layers[1]
	for _, p := range []string{"opt/claude-code/claude", "opt/codex/bin/codex", "opt/codex/codex-path/rg"} {
		fi, err := os.Lstat(filepath.Join(top, p))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("%s: %v, %v; want an executable file", p, fi, err)
		}
	}
	for link, want := range map[string]string{"usr/local/bin/claude": "/opt/claude-code/claude", "usr/local/bin/codex": "/opt/codex/bin/codex"} {
		if got, err := os.Readlink(filepath.Join(top, link)); err != nil || got != want {
			t.Errorf("%s -> %q, %v; want %s", link, got, err, want)
		}
	}
	if !strings.Contains(strings.Join(img.Config.Env, " "), "DISABLE_AUTOUPDATER=1") {
		t.Errorf("env %v", img.Config.Env)
	}
	again, err := s.Resolve(context.Background(), "agents:latest", func(p Progress) { t.Errorf("cached image reported %+v", p) })
	if err != nil || again.Digest != img.Digest {
		t.Errorf("second resolve: %v, %v", again, err)
	}
	for _, p := range agentPackages {
		if _, err := os.Stat(s.npmFile(p)); err != nil {
			t.Errorf("%s@%s: its tarball is not in the build cache: %v", p.Name, p.Version, err)
		}
		if fi, err := os.Stat(s.npmUnpacked(p)); err != nil || !fi.IsDir() {
			t.Errorf("%s@%s: its unpacked package is not in the build cache: %v", p.Name, p.Version, err)
		}
	}
}

// npmFixture is a registry speaking npm's wire format for test packages.
type npmFixture struct {
	srv       *httptest.Server
	docs      map[string]string // path -> JSON
	tarballs  map[string][]byte // path -> bytes
	tarGets   atomic.Int32
	integrity map[string]string // overrides a document's integrity
}

func newNPMFixture(t *testing.T) *npmFixture {
	f := &npmFixture{docs: map[string]string{}, tarballs: map[string][]byte{}, integrity: map[string]string{}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b, ok := f.tarballs[r.URL.EscapedPath()]; ok {
			f.tarGets.Add(1)
			w.Write(b)
			return
		}
		if d, ok := f.docs[r.URL.EscapedPath()]; ok {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(d))
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// add serves tgz as p's tarball and returns p with its integrity pinned
// to pinned, or to tgz's own when pinned is "".
func (f *npmFixture) add(p npmPackage, tgz []byte, served, pinned string) npmPackage {
	sum := sha512.Sum512(tgz)
	own := "sha512-" + base64.StdEncoding.EncodeToString(sum[:])
	p.Integrity = own
	if pinned != "" {
		p.Integrity = pinned
	}
	tarPath := "/" + p.Name + "/-/x-" + p.Version + ".tgz"
	f.tarballs[tarPath] = tgz
	doc := map[string]any{"name": p.Name, "version": p.Version, "dist": map[string]string{
		"integrity": cmpOr(served, p.Integrity), "tarball": f.srv.URL + tarPath,
	}}
	b, _ := json.Marshal(doc)
	f.docs["/"+strings.Replace(p.Name, "/", "%2f", 1)+"/"+p.Version] = string(b)
	return p
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func gzipped(t *testing.T, tarball []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(tarball)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// fakeDebianCache puts a tiny root in cache where the debian image's
// build would, so the agents image builds on it with no debootstrap.
func fakeDebianCache(t *testing.T, s *Store) {
	t.Helper()
	root := filepath.Join(s.buildCacheDir(debianSource), "root")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "etc", "debian_version"), []byte("12.99 test\n"), 0o644)
	fakeAccounts(t, root)
}

func toolPackage(name string) npmPackage {
	return npmPackage{Name: "@test/" + name, Version: "1.0.0", Dir: "opt/" + name, Links: map[string]string{"usr/local/bin/" + name: "bin/" + name}}
}

func toolTarball(t *testing.T, name string, extra ...tf) []byte {
	entries := append([]tf{
		{name: "package/", typ: tar.TypeDir, mode: 0o755},
		{name: "package/bin/" + name, mode: 0o4755, body: "#!/bin/sh\necho " + name + " 1.0.0\n"},
		{name: "package/README.md", mode: 0o644, body: "readme"},
	}, extra...)
	return gzipped(t, tarBytes(t, entries...))
}

// TestAgentsFromRegistry builds the image from a test registry: tarballs
// verified and kept in the build cache by name and version, set-user-ID
// bits dropped, links made; a second store downloads nothing; a cached
// tarball that went missing is downloaded again.
func TestAgentsFromRegistry(t *testing.T) {
	requiresRoot(t)
	f := newNPMFixture(t)
	one := f.add(toolPackage("one"), toolTarball(t, "one"), "", "")
	two := two(t, f)
	cache := t.TempDir()
	opts := []Option{WithBuildCache(cache), WithNPMRegistry(f.srv.URL), WithDebootstrap("/bin/false"), testAgentPackages(one, two)}
	s := newStore(t, opts...)
	fakeDebianCache(t, s)
	var downloaded []Progress
	img, err := s.Resolve(context.Background(), "agents", func(p Progress) {
		if strings.HasPrefix(p.Message, "downloading ") {
			downloaded = append(downloaded, p)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Layers) != 2 || readFile(t, filepath.Join(img.Layers[0], "etc/debian_version")) != "12.99 test\n" {
		t.Fatalf("layers %v: the lower is not debian's", img.Layers)
	}
	if len(downloaded) == 0 || downloaded[len(downloaded)-1].Total == 0 || downloaded[len(downloaded)-1].Done != downloaded[len(downloaded)-1].Total {
		t.Errorf("download progress %+v", downloaded)
	}
	top := img.Layers[1]
	fi, err := os.Lstat(filepath.Join(top, "opt/one/bin/one"))
	if err != nil || fi.Mode()&os.ModeSetuid != 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("opt/one/bin/one: %v, %v; want 0755 without set-user-ID", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(top, "usr/local/bin/one")); err != nil || l != "/opt/one/bin/one" {
		t.Errorf("usr/local/bin/one -> %q, %v", l, err)
	}
	if !exists(filepath.Join(top, "opt/two/bin/two")) || exists(filepath.Join(top, "opt/two/README.md")) {
		t.Errorf("two's Sub was not what went to opt/two")
	}
	for _, p := range []npmPackage{one, two} {
		if _, err := os.Stat(s.npmFile(p)); err != nil {
			t.Errorf("%s@%s: its tarball is not in the build cache: %v", p.Name, p.Version, err)
		}
		if !exists(filepath.Join(s.npmUnpacked(p), "bin", strings.TrimPrefix(p.Name, "@test/"))) {
			t.Errorf("%s@%s: its unpacked package is not in the build cache", p.Name, p.Version)
		}
	}
	if got := f.tarGets.Load(); got != 2 {
		t.Errorf("%d tarball downloads, want 2", got)
	}

	// A second store (same cache) downloads nothing and builds the same,
	// from the unpacked packages; a third, with those gone, from the
	// tarballs.
	for _, name := range []string{"second", "third"} {
		again, err := newStore(t, opts...).Resolve(context.Background(), "agents", nil)
		if err != nil || again.Digest != img.Digest {
			t.Fatalf("%s store: %v, %v", name, again, err)
		}
		if got := f.tarGets.Load(); got != 2 {
			t.Errorf("the %s store downloaded: %d downloads", name, got)
		}
		os.RemoveAll(s.npmUnpacked(one))
		os.RemoveAll(s.npmUnpacked(two))
	}
	// A tarball gone from the cache is fetched again; one corrupted in it
	// is noticed and fetched again too.
	os.Remove(s.npmFile(one))
	os.WriteFile(s.npmFile(two), []byte("corrupt"), 0o600)
	fourth, err := newStore(t, opts...).Resolve(context.Background(), "agents", nil)
	if err != nil || fourth.Digest != img.Digest {
		t.Fatalf("fourth store: %v, %v", fourth, err)
	}
	if got := f.tarGets.Load(); got != 4 {
		t.Errorf("%d downloads, want 4 (both fetched again)", got)
	}
}

func two(t *testing.T, f *npmFixture) npmPackage {
	p := toolPackage("two")
	p.Sub = "vendor/x86"
	return f.add(p, gzipped(t, tarBytes(t,
		tf{name: "package/README.md", body: "readme"},
		tf{name: "package/vendor/x86/bin/two", mode: 0o755, body: "#!/bin/sh\necho two\n"},
	)), "", "")
}

func testAgentPackages(p ...npmPackage) Option {
	return func(o *options) { o.agentPackages = p }
}

// TestAgentsIntegrity: a tarball whose sha512 is not the pinned one is
// refused and not cached, and so is a registry whose document claims
// another integrity than the pinned one (before any tarball is fetched).
func TestAgentsIntegrity(t *testing.T) {
	requiresRoot(t)
	f := newNPMFixture(t)
	good := toolTarball(t, "one")
	evil := toolTarball(t, "one", tf{name: "package/bin/backdoor", mode: 0o755, body: "evil"})
	sum := sha512.Sum512(good)
	pinned := "sha512-" + base64.StdEncoding.EncodeToString(sum[:])
	// The document says the pinned integrity, the tarball is another.
	swapped := f.add(toolPackage("one"), evil, pinned, pinned)
	// The document itself names another integrity.
	p2 := toolPackage("two")
	p2.Version = "2.0.0"
	lying := f.add(p2, good, "sha512-"+base64.StdEncoding.EncodeToString(make([]byte, 64)), pinned)
	for name, c := range map[string]struct {
		p    npmPackage
		want string
		gets int32
	}{
		"tarball":  {swapped, "the tarball's sha512 is", 1},
		"document": {lying, "not \"" + pinned + "\" as reins pins it", 0},
	} {
		t.Run(name, func(t *testing.T) {
			f.tarGets.Store(0)
			cache := t.TempDir()
			s := newStore(t, WithBuildCache(cache), WithNPMRegistry(f.srv.URL), WithDebootstrap("/bin/false"), testAgentPackages(c.p))
			fakeDebianCache(t, s)
			_, err := s.Resolve(context.Background(), "agents", nil)
			if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, errdefs.ErrUnavailable) {
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
			if strings.Contains(err.Error(), cache) {
				t.Errorf("the error names the cache's path: %v", err)
			}
			if got := f.tarGets.Load(); got != c.gets {
				t.Errorf("%d tarball downloads, want %d", got, c.gets)
			}
			ents, _ := os.ReadDir(filepath.Join(cache, "npm"))
			if len(ents) != 0 {
				t.Errorf("the build cache kept %v", ents)
			}
			if _, err := s.Resolve(context.Background(), "agents", nil); err == nil {
				t.Errorf("refused once, built the second time")
			}
			if ents, _ := os.ReadDir(filepath.Join(s.Dir(), "tmp")); len(ents) != 0 {
				t.Errorf("tmp not empty: %v", ents)
			}
		})
	}
}

// TestAgentsHostileTarball: a pinned tarball (its sha512 matches: the
// registry's own, say) that tries to write or take anything outside its
// directory is refused, and the host is untouched.
func TestAgentsHostileTarball(t *testing.T) {
	requiresRoot(t)
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	hostFile := filepath.Join(outside, "vendor/x86/bin/one")
	for name, c := range map[string]struct {
		sub     string
		entries []tf
	}{
		"dotdot": {"", []tf{{name: "package/../../../../../../.." + victim, body: "pwned"}}},
		"symlink escape": {"", []tf{
			{name: "package/", typ: tar.TypeDir, mode: 0o755},
			{name: "package/out", typ: tar.TypeSymlink, link: outside},
			{name: "package/out/victim", body: "pwned"},
		}},
		"absolute": {"", []tf{{name: victim, body: "pwned"}}},
		// The package's directory a link to the host's: moving its Sub
		// into the image would take the host's files.
		"package is a symlink": {"vendor/x86", []tf{{name: "package", typ: tar.TypeSymlink, link: outside}}},
		"sub is a symlink": {"vendor/x86", []tf{
			{name: "package/vendor/", typ: tar.TypeDir, mode: 0o755},
			{name: "package/vendor/x86", typ: tar.TypeSymlink, link: filepath.Join(outside, "vendor/x86")},
		}},
		"program is a symlink": {"", []tf{
			{name: "package/bin/", typ: tar.TypeDir, mode: 0o755},
			{name: "package/bin/one", typ: tar.TypeSymlink, link: "/bin/sh"},
		}},
	} {
		t.Run(name, func(t *testing.T) {
			os.MkdirAll(filepath.Dir(hostFile), 0o755)
			os.WriteFile(hostFile, []byte("host"), 0o755)
			f := newNPMFixture(t)
			p := toolPackage("one")
			p.Sub = c.sub
			p = f.add(p, gzipped(t, tarBytes(t, c.entries...)), "", "")
			s := newStore(t, WithBuildCache(t.TempDir()), WithNPMRegistry(f.srv.URL), WithDebootstrap("/bin/false"), testAgentPackages(p))
			fakeDebianCache(t, s)
			_, err := s.Resolve(context.Background(), "agents", nil)
			if err == nil {
				t.Fatal("a hostile tarball was installed")
			}
			t.Logf("refused: %v", err)
			if exists(victim) {
				t.Errorf("the tarball wrote %s", victim)
			}
			if got := readFile(t, hostFile); got != "host" {
				t.Errorf("the host's file changed: %q", got)
			}
			if ents, _ := os.ReadDir(filepath.Join(s.Dir(), "tmp")); len(ents) != 0 {
				t.Errorf("tmp not empty: %v", ents)
			}
		})
	}
}
