package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/reinsdev/reins/internal/testenv"
)

// TestComputerCLI: `reins sandbox computer` against a real reins serve,
// on gVisor and runc, in a desktop sandbox made with --screen 1024x768:
// show says the screen; a screenshot is a PNG of that size whose pixels
// show the red xterm started in it; typed text and a Return reach the
// xterm's program; move, cursor and --scale agree; off-screen
// coordinates and an unknown key are refused in the executor's words. A
// busybox sandbox has no display and says which image to use, and a bad
// --screen is refused.
func TestComputerCLI(t *testing.T) {
	testenv.RequiresBinary(t, "debootstrap", "debootstrap")
	s := startService(t)

	if r := s.run("sandbox", "create", "--image", "desktop", "--screen", "10x10"); r.code != 2 || !strings.Contains(r.stderr, "each side must be 320 to 4096 pixels") {
		t.Errorf("--screen 10x10: %s", r)
	}
	if r := s.run("sandbox", "create", "--screen", "1024x768"); r.code == 0 || !strings.Contains(r.stderr, "image busybox has no display: --screen needs a desktop image (--image desktop)") {
		t.Errorf("--screen on busybox: %s", r)
	}
	plain := s.create("--network", "none")
	if r := s.run("sandbox", "computer", plain, "screenshot", "-o", filepath.Join(t.TempDir(), "x.png")); r.code == 0 || !strings.Contains(r.stderr, "--image desktop") {
		t.Errorf("a screenshot of busybox: %s", r)
	}
	s.must("sandbox", "rm", plain)

	onBackends(t, s, func(t *testing.T, backend string) {
		id := s.create("--backend", backend, "--image", "desktop", "--screen", "1024x768", "--network", "none")
		defer s.run("sandbox", "rm", id)
		testComputerCLI(t, s, id)
	})
}

// onBackends runs fn as a subtest for gvisor and for runc, with s
// failing the subtest.
func onBackends(t *testing.T, s *service, fn func(t *testing.T, backend string)) {
	for _, backend := range []string{"gvisor", "runc"} {
		t.Run(backend, func(t *testing.T) {
			outer := s.t
			s.t = t
			defer func() { s.t = outer }()
			fn(t, backend)
		})
	}
}

func testComputerCLI(t *testing.T, s *service, id string) {
	if show := s.must("sandbox", "show", id); !regexp.MustCompile(`(?m)^screen\s+1024x768$`).MatchString(show) {
		t.Errorf("show does not say the screen:\n%s", show)
	}
	var shown struct {
		Screen string `json:"screen"`
		Spec   struct {
			Screen string `json:"screen"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(s.must("sandbox", "show", "--json", id)), &shown); err != nil || shown.Screen != "1024x768" || shown.Spec.Screen != "1024x768" {
		t.Errorf("show --json: %+v, %v", shown, err)
	}
	var listed []struct{ ID, Screen string }
	if err := json.Unmarshal([]byte(s.must("sandbox", "ls", "--json")), &listed); err != nil {
		t.Fatal(err)
	}
	for _, sb := range listed {
		if sb.ID == id && sb.Screen != "1024x768" {
			t.Errorf("ls --json: screen %q", sb.Screen)
		}
	}

	dir := t.TempDir()
	f := filepath.Join(dir, "f.png")
	started := time.Now()
	if out := s.must("sandbox", "computer", id, "screenshot", "-o", f); !strings.HasPrefix(out, f+" 1024x768 (") {
		t.Errorf("screenshot -o printed %q", out)
	}
	t.Logf("%s: the first screenshot (the X server's start) took %v", id, time.Since(started).Round(time.Millisecond))
	first := readPNG(t, f, 1024, 768)
	if n := redPart(first); n > 0.5 {
		t.Fatalf("the screen is %.0f%% red before anything ran on it: the pixel check below would prove nothing", n*100)
	}

	// A red xterm (full screen under the window manager) running a
	// program that keeps the line it reads.
	s.must("sandbox", "exec", "-d", "--tag", "xterm", id, "--", "sh", "-c",
		`exec xterm -bg red -fg red -e sh -c 'read l; echo "$l" > /tmp/typed; sleep 1000'`)
	var shot image.Image
	eventually(t, 30*time.Second, "the red xterm on the screen", func() (bool, string) {
		r := s.run("sandbox", "computer", id, "screenshot", "-o", "-")
		if r.code != 0 {
			return false, r.String()
		}
		shot = decodePNG(t, []byte(r.stdout), 1024, 768)
		n := redPart(shot)
		return n > 0.95, fmt.Sprintf("%.0f%% red", n*100)
	})

	s.must("sandbox", "computer", id, "type", "hello reins")
	s.must("sandbox", "computer", id, "key", "Return")
	eventually(t, 10*time.Second, "the typed line in the xterm's program", func() (bool, string) {
		r := s.run("sandbox", "exec", id, "--", "cat", "/tmp/typed")
		return r.stdout == "hello reins\n", r.String()
	})

	if out := s.must("sandbox", "computer", id, "move", "100", "200"); out != "cursor 100,200\n" {
		t.Errorf("move printed %q", out)
	}
	if out := s.must("sandbox", "computer", id, "move", "256", "192", "--scale", "512x384"); out != "cursor 256,192\n" {
		t.Errorf("move --scale printed %q", out)
	}
	// Pixel 256,192 of the half-size space covers 512..513, 384..385 of
	// the screen.
	var cx, cy int
	if out := s.must("sandbox", "computer", id, "cursor"); !scanCursor(out, &cx, &cy) || cx < 512 || cx > 513 || cy < 384 || cy > 385 {
		t.Errorf("cursor after a move at half scale printed %q, want the screen's 512,384 (or the next pixel)", out)
	}
	small := filepath.Join(dir, "small.png")
	s.must("sandbox", "computer", id, "screenshot", "--scale", "512x384", "-o", small)
	if n := redPart(readPNG(t, small, 512, 384)); n < 0.95 {
		t.Errorf("the scaled screenshot is %.0f%% red", n*100)
	}
	zoom := filepath.Join(dir, "zoom.png")
	s.must("sandbox", "computer", id, "zoom", "0", "0", "512", "384", "-o", zoom)
	if z := readPNG(t, zoom, 1024, 768); redPart(z) < 0.95 {
		t.Errorf("the zoom %v is %.0f%% red", z.Bounds(), redPart(z)*100)
	}

	var resp struct {
		Png          string `json:"png"`
		Width        int    `json:"width"`
		ScreenHeight int    `json:"screen_height"`
		Cursor       struct{ X, Y int }
	}
	out := s.must("sandbox", "computer", id, "click", "20", "30", "--button", "right", "--screenshot", "--json")
	if err := json.Unmarshal([]byte(out), &resp); err != nil || resp.Width != 1024 || resp.ScreenHeight != 768 || resp.Cursor.X != 20 || resp.Cursor.Y != 30 {
		t.Errorf("click --screenshot --json: %.300s (%v)", out, err)
	} else if b, err := base64.StdEncoding.DecodeString(resp.Png); err != nil {
		t.Errorf("its png: %v", err)
	} else {
		decodePNG(t, b, 1024, 768)
	}

	if r := s.run("sandbox", "computer", id, "click", "5000", "10"); r.code == 0 || !strings.Contains(r.stderr, "1024x768") {
		t.Errorf("an off-screen click: %s", r)
	}
	if r := s.run("sandbox", "computer", id, "key", "nosuchkey"); r.code == 0 || !strings.Contains(r.stderr, `unknown key "nosuchkey"`) || !strings.Contains(r.stderr, "ctrl+l") {
		t.Errorf("an unknown key: %s", r)
	}
}

func scanCursor(out string, x, y *int) bool {
	n, err := fmt.Sscanf(out, "cursor %d,%d\n", x, y)
	return n == 2 && err == nil
}

// maxScreenshot bounds a screenshot the test reads (the sandbox's bytes).
const maxScreenshot = 16 << 20

// readPNG reads a PNG file the CLI wrote (decodePNG).
func readPNG(t *testing.T, path string, w, h int) image.Image {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return decodePNG(t, b, w, h)
}

// decodePNG decodes a screenshot after checking its length and its
// header's size (w x h).
func decodePNG(t *testing.T, b []byte, w, h int) image.Image {
	t.Helper()
	if len(b) > maxScreenshot {
		t.Fatalf("the screenshot is %d bytes, over %d", len(b), maxScreenshot)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not a PNG (%d bytes): %v", len(b), err)
	}
	if cfg.Width != w || cfg.Height != h {
		t.Fatalf("the screenshot is %dx%d, want %dx%d", cfg.Width, cfg.Height, w, h)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// redPart is the share of img's pixels that are pure red (give or take
// the scaler's rounding).
func redPart(img image.Image) float64 {
	b := img.Bounds()
	red := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r>>8 > 240 && g>>8 < 16 && bl>>8 < 16 {
				red++
			}
		}
	}
	return float64(red) / float64(b.Dx()*b.Dy())
}
