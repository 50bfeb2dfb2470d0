package image

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/internal/testenv"
	"github.com/reinsdev/reins/sandbox"
)

// TestDesktop builds the desktop image with the operator's build cache
// (DefaultBuildCache): the first run on a machine installs its packages
// from the Debian mirror, later runs copy the cached root. Chromium is run
// in it, in gVisor and runc, by the e2e test TestDesktopImage.
func TestDesktop(t *testing.T) {
	requiresRoot(t)
	testenv.RequiresBinary(t, "debootstrap", "debootstrap")
	s := newStore(t, WithBuildCache(DefaultBuildCache))
	built := !s.inBuildCache(desktopSource())
	var last Progress
	var reports int
	start := time.Now()
	img, err := s.Resolve(context.Background(), "desktop", func(p Progress) {
		reports++
		if p.Total > 0 {
			last = p
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("desktop %s: %d MiB, resolved in %v (built: %v, %d progress reports)",
		img.Digest, img.Size>>20, time.Since(start).Round(time.Millisecond), built, reports)
	if built && (last.Total == 0 || last.Done != last.Total) {
		t.Errorf("the last counted progress report %+v does not reach its total", last)
	}
	if len(img.Layers) != 1 || img.Cached {
		t.Fatalf("%d layers, cached %v; want one layer, newly made", len(img.Layers), img.Cached)
	}
	root := img.Layers[0]
	for _, p := range []string{
		"usr/bin/Xvfb", "usr/bin/matchbox-window-manager", "usr/bin/xterm", "usr/lib/chromium/chromium",
		"usr/bin/xwd", "usr/bin/xdotool", "usr/bin/xdpyinfo", "usr/bin/xwdtopnm", "usr/bin/pnmtopng",
		"usr/bin/python3", "usr/bin/fc-match",
	} {
		if fi, err := os.Stat(filepath.Join(root, p)); err != nil || fi.Mode().Perm()&0o111 == 0 {
			t.Errorf("%s: %v, %v; want an executable", p, fi, err)
		}
	}
	for _, p := range []string{
		"usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
		"usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
		"usr/share/doc/chromium/copyright",
	} {
		if !exists(filepath.Join(root, p)) {
			t.Errorf("%s missing", p)
		}
	}
	for _, p := range []string{"usr/share/man/man1", "usr/share/doc/chromium/changelog.Debian.gz", "usr/share/locale/de"} {
		if exists(filepath.Join(root, p)) {
			t.Errorf("%s was not dropped", p)
		}
	}
	if got := readFile(t, filepath.Join(root, "etc/passwd")); !strings.Contains(got, "\nuser:x:1000:1000:user:/home/user:/bin/bash\n") {
		t.Errorf("etc/passwd lacks the account user: %q", got)
	}
	checkUserHome(t, root)
	if m, _ := filepath.Glob(filepath.Join(root, "var/lib/apt/lists/*_*")); len(m) != 0 {
		t.Errorf("%d apt lists left", len(m))
	}
	if m, _ := filepath.Glob(filepath.Join(root, "var/cache/apt/archives/*.deb")); len(m) != 0 {
		t.Errorf("%d .deb files left", len(m))
	}
	if got := readFile(t, filepath.Join(root, "etc/resolv.conf")); got != "" {
		t.Errorf("the host's resolv.conf is in the image: %q", got)
	}
	if got := readFile(t, filepath.Join(root, "etc/hosts")); got != string(HostsFile("")) {
		t.Errorf("the host's hosts file is in the image: %q", got)
	}
	bin := filepath.Join(root, "usr/local/bin/browser")
	if fi, err := os.Lstat(bin); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o755 {
		t.Errorf("browser: %v, %v; want an executable file", fi, err)
	}
	if b, err := os.ReadFile(bin); err != nil || !bytes.Equal(b, desktopBrowser) {
		t.Errorf("browser is not desktop_browser.sh: %v", err)
	}
	var policy map[string]any
	if b, err := os.ReadFile(filepath.Join(root, "etc/chromium/policies/managed/reins.json")); err != nil || json.Unmarshal(b, &policy) != nil || policy["BrowserSignin"] != float64(0) {
		t.Errorf("Chromium's managed policy: %v, %v; want reins.json with BrowserSignin 0", policy, err)
	}
	if got := img.Config.Labels[sandbox.DisplayLabel]; got != sandbox.DefaultScreen {
		t.Errorf("label %s = %q, want %q", sandbox.DisplayLabel, got, sandbox.DefaultScreen)
	}
	if !slices.Contains(img.Config.Env, "DISPLAY=:0") {
		t.Errorf("env %v has no DISPLAY=:0", img.Config.Env)
	}
	again, err := s.Resolve(context.Background(), "desktop:latest", func(p Progress) { t.Errorf("the cached image reported %+v", p) })
	if err != nil || again.Digest != img.Digest || !again.Cached {
		t.Errorf("second resolve: %+v, %v; want the same image, cached", again, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(s.Dir(), "tmp")); len(ents) != 0 {
		t.Errorf("tmp not empty: %v", ents)
	}
}

// The recipe names every package and the browser script, so changing
// either builds the image again rather than serving the old one.
func TestDesktopSource(t *testing.T) {
	src := desktopSource()
	saved := desktopBrowser
	t.Cleanup(func() { desktopBrowser = saved })
	desktopBrowser = append(slices.Clone(saved), '\n')
	if desktopSource() == src {
		t.Error("a new browser script leaves the recipe unchanged")
	}
	desktopBrowser = saved
	pkgs := desktopPackages
	t.Cleanup(func() { desktopPackages = pkgs })
	desktopPackages = append(slices.Clone(pkgs), "fonts-noto-cjk")
	if desktopSource() == src {
		t.Error("a new package leaves the recipe unchanged")
	}
}

// Image.Cached: false when Resolve unpacked a layer, true when every
// layer was in the store already (an OCI layout is read again each time).
func TestResolveCached(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(testImage(t, lowerLayer(t))); err != nil {
		t.Fatal(err)
	}
	s := newStore(t)
	for i, want := range []bool{false, true} {
		img, err := s.Resolve(context.Background(), "oci:"+dir, nil)
		if err != nil || img.Cached != want {
			t.Fatalf("resolve %d: cached %v, %v; want %v", i+1, img != nil && img.Cached, err, want)
		}
	}
}

func TestAptSteps(t *testing.T) {
	var a aptSteps
	var p Progress
	for _, line := range []string{
		"Reading package lists...",
		"0 upgraded, 2 newly installed, 0 to remove and 0 not upgraded.",
		"Get:1 http://deb.debian.org/debian bookworm/main amd64 xterm amd64 379-1 [1 MB]",
		"Get:2 http://deb.debian.org/debian bookworm/main amd64 xdotool amd64 1:3 [1 kB]",
		"Unpacking xterm (379-1) ...",
		"Unpacking xdotool (1:3) ...",
		"Setting up xterm (379-1) ...",
		"Setting up xdotool (1:3) ...",
	} {
		p = a.progress(line)
		if p.Message != line || p.Total > 0 && p.Done >= p.Total {
			t.Fatalf("after %q: %+v", line, p)
		}
	}
	if p.Total != 6 || p.Done != 5 {
		t.Errorf("last report %+v, want 5 of 6 (the last step is reported when apt-get exits)", p)
	}
}

func TestDropBelow(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"a/copyright": "keep", "a/changelog.gz": "drop", "b/c/README": "drop", "top": "drop",
	} {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(text), 0o644)
	}
	os.Symlink("/etc/passwd", filepath.Join(dir, "a", "link"))
	if err := dropBelow(dir); err != nil {
		t.Fatal(err)
	}
	var left []string
	filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error {
		rel, _ := filepath.Rel(dir, p)
		left = append(left, rel)
		return nil
	})
	if want := []string{".", "a", "a/copyright"}; !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
	if err := dropBelow(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("a missing directory: %v", err)
	}
}

// With no desktop root in the build cache and the mirror down, the build
// fails at once, unavailable, naming the mirror, and leaves nothing.
func TestDesktopMirrorDown(t *testing.T) {
	testenv.RequiresRoot(t)
	s := newStore(t, WithBuildCache(t.TempDir()), WithDebianMirror("http://127.0.0.1:1/debian"))
	_, err := s.Resolve(context.Background(), "desktop", nil)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("err = %v; want unavailable, naming the mirror", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(s.Dir(), "tmp")); len(ents) != 0 {
		t.Errorf("tmp not empty: %v", ents)
	}
}
