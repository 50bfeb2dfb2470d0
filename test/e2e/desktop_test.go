package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reinsdev/reins/internal/testenv"
)

// desktopPage is the page TestDesktopImage shows: white, with a red block
// of 300x200 pixels at (100, 100) of the page.
const desktopPage = `<!doctype html><html><head><meta charset="utf-8"><title>reins desktop</title></head>
<body style="margin:0;background:#ffffff">
<div style="position:absolute;left:100px;top:100px;width:300px;height:200px;background:#ff0000"></div>
<p style="position:absolute;left:100px;top:340px;font:20px sans-serif">reins — ünïcødé — 你好</p>
</body></html>
`

// desktopDisplay is the X display the test starts its own Xvfb on: not
// the image's :0, which belongs to the executor (it starts Xvfb there on
// the first computer call), so the test never fights it.
const desktopDisplay = ":5"

// TestDesktopImage: in the desktop image, on gVisor and on runc, Xvfb,
// the window manager and `browser` (the image's Chromium wrapper) show a
// page served inside the sandbox, and an xwd capture of the screen has
// the page's red block where the page puts it: 300x200 pixels at x=100,
// below Chromium's toolbar, full-screen at 0,0 under matchbox.
func TestDesktopImage(t *testing.T) {
	testenv.RequiresBinary(t, "debootstrap", "debootstrap")
	s := startService(t)
	buildDesktop(t, s)
	for _, backend := range []string{"gvisor", "runc"} {
		t.Run(backend, func(t *testing.T) {
			outer := s.t
			s.t = t
			defer func() { s.t = outer }()
			id := s.create("--backend", backend, "--image", "desktop", "--memory", "2G", "--network", "none")
			defer s.run("sandbox", "rm", id)
			testDesktop(t, s, id)
		})
	}
}

// buildDesktop builds the desktop image with `reins image build` (from
// the operator's build cache, or from Debian's packages the first time on
// a machine) and checks what it answers, then that a second build is
// served from the service's store.
func buildDesktop(t *testing.T, s *service) {
	start := time.Now()
	var info struct {
		Ref       string  `json:"ref"`
		Digest    string  `json:"digest"`
		SizeBytes wireInt `json:"size_bytes"`
		Cached    bool    `json:"cached"`
		Screen    string  `json:"screen"`
	}
	if err := json.Unmarshal([]byte(s.must("image", "build", "desktop", "--json")), &info); err != nil {
		t.Fatal(err)
	}
	t.Logf("reins image build desktop: %+v in %v", info, time.Since(start).Round(time.Millisecond))
	if info.Ref != "desktop" || !strings.HasPrefix(info.Digest, "sha256:") || info.SizeBytes <= 0 || info.Cached || info.Screen != "1280x800" {
		t.Errorf("the first build answered %+v; want desktop, a digest, a size, not cached, screen 1280x800", info)
	}
	again := s.must("image", "build", "desktop")
	if want := "desktop cached: " + info.Digest; !strings.HasPrefix(again, want) || !strings.Contains(again, "display 1280x800") {
		t.Errorf("the second build printed %q; want %q..., display 1280x800", again, want)
	}
}

func testDesktop(t *testing.T, s *service, id string) {
	// Chromium is told to keep its shared memory in /tmp, but other
	// programs use /dev/shm: it must be writable.
	if r := s.run("sandbox", "exec", id, "--", "sh", "-c", "echo x > /dev/shm/reins && rm /dev/shm/reins && df -k /dev/shm | tail -n 1"); r.code != 0 {
		t.Errorf("/dev/shm is not writable: %s", r)
	} else {
		t.Logf("/dev/shm: %s", strings.TrimSpace(r.stdout))
	}
	if r := s.runStdin(desktopPage, "sandbox", "exec", "-i", id, "--", "sh", "-c", "mkdir -p /tmp/page && cat > /tmp/page/index.html"); r.code != 0 {
		t.Fatalf("writing the page: %s", r)
	}
	env := []string{"--env", "DISPLAY=" + desktopDisplay}
	start := func(name, script string) {
		t.Helper()
		args := append([]string{"sandbox", "exec", "-d", "--tag", name}, env...)
		s.must(append(args, id, "--", "sh", "-c", script+" > /tmp/"+name+".log 2>&1")...)
	}
	started := time.Now()
	start("xvfb", "exec Xvfb "+desktopDisplay+" -screen 0 1280x800x24 -nolisten tcp")
	waitFor(t, s, id, "Xvfb", "test -S /tmp/.X11-unix/X"+strings.TrimPrefix(desktopDisplay, ":"))
	start("wm", "exec matchbox-window-manager -use_titlebar no")
	start("http", "cd /tmp/page && exec python3 -m http.server 8000 --bind 127.0.0.1")
	waitFor(t, s, id, "the page server", "python3 -c 'import urllib.request; urllib.request.urlopen(\"http://127.0.0.1:8000/\")'")
	start("browser", "exec browser http://127.0.0.1:8000/")

	var box image.Rectangle
	var last string
	deadline := time.Now().Add(90 * time.Second)
	for {
		img, err := captureScreen(t, s, id)
		if err == nil {
			if box, err = redBox(img); err == nil {
				break
			}
		}
		last = err.Error()
		if time.Now().After(deadline) {
			logs := s.run(append([]string{"sandbox", "exec"}, id, "--", "sh", "-c", "tail -n 20 /tmp/*.log")...)
			t.Fatalf("the page's red block did not show in 90s: %s\nlogs:\n%s", last, logs.stdout)
		}
		time.Sleep(time.Second)
	}
	t.Logf("%s: the page showed in %v; its red block at %v (page top at y=%d)",
		id, time.Since(started).Round(time.Millisecond), box, box.Min.Y-100)
	if box.Dx() != 300 || box.Dy() != 200 || box.Min.X != 100 {
		t.Errorf("the red block is at %v, want 300x200 at x=100", box)
	}
	// Below the toolbar, which is some tens of pixels tall.
	if top := box.Min.Y - 100; top < 40 || top > 140 {
		t.Errorf("the page begins at y=%d, want Chromium's toolbar (40 to 140 pixels) above it", top)
	}
	t.Logf("with Chromium showing the page: %s", memoryLine(t, s.must("sandbox", "show", id)))
	// The browser's window is the whole screen at 0,0.
	r := s.run(append(append([]string{"sandbox", "exec"}, env...), id, "--", "sh", "-c",
		"xdotool search --onlyvisible --class chromium getwindowgeometry %@ | grep -m1 -A1 Position")...)
	if r.code != 0 || !strings.Contains(r.stdout, "Position: 0,0") || !strings.Contains(r.stdout, "Geometry: 1280x800") {
		t.Errorf("Chromium's window: %s; want 1280x800 at 0,0", r)
	}
}

// waitFor retries a shell check in the sandbox for up to 30 seconds.
func waitFor(t *testing.T, s *service, id, what, check string) {
	t.Helper()
	eventually(t, 30*time.Second, what, func() (bool, string) {
		r := s.run("sandbox", "exec", id, "--", "sh", "-c", check)
		return r.code == 0, r.String()
	})
}

// maxCapture bounds the PNG the sandbox hands back (a 1280x800 screen is
// well under a megabyte): it is the sandbox's bytes.
const maxCapture = 16 << 20

// captureScreen takes an xwd capture of the test's display in the
// sandbox, as PNG, and decodes it after checking its size.
func captureScreen(t *testing.T, s *service, id string) (image.Image, error) {
	t.Helper()
	r := s.run("sandbox", "exec", "--env", "DISPLAY="+desktopDisplay, id, "--", "sh", "-c",
		"xwd -root -silent | xwdtopnm 2>/dev/null | pnmtopng > /tmp/screen.png")
	if r.code != 0 {
		return nil, fmt.Errorf("capturing the screen: %s", r)
	}
	dst := filepath.Join(t.TempDir(), "screen.png")
	if r := s.run("sandbox", "cp", id+":/tmp/screen.png", dst); r.code != 0 {
		return nil, fmt.Errorf("copying the capture: %s", r)
	}
	b, err := os.ReadFile(dst)
	if err != nil {
		return nil, err
	}
	if len(b) > maxCapture {
		return nil, fmt.Errorf("the capture is %d bytes, over %d", len(b), maxCapture)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("the capture is not a PNG: %v", err)
	}
	if cfg.Width != 1280 || cfg.Height != 800 {
		return nil, fmt.Errorf("the capture is %dx%d, want 1280x800", cfg.Width, cfg.Height)
	}
	return png.Decode(bytes.NewReader(b))
}

// redBox returns the bounds of the pure red pixels of img, failing unless
// there are some and every pixel inside them is red too.
func redBox(img image.Image) (image.Rectangle, error) {
	red := func(x, y int) bool {
		r, g, b, _ := img.At(x, y).RGBA()
		return r>>8 > 240 && g>>8 < 16 && b>>8 < 16
	}
	var box image.Rectangle
	found := false
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			if !red(x, y) {
				continue
			}
			p := image.Rect(x, y, x+1, y+1)
			if !found {
				box, found = p, true
			} else {
				box = box.Union(p)
			}
		}
	}
	if !found {
		return box, fmt.Errorf("no red pixels on the screen (yet)")
	}
	for y := box.Min.Y; y < box.Max.Y; y++ {
		for x := box.Min.X; x < box.Max.X; x++ {
			if !red(x, y) {
				return box, fmt.Errorf("the red area %v has a pixel of another colour at (%d, %d)", box, x, y)
			}
		}
	}
	return box, nil
}
