package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reinsdev/reins/internal/cdp"
	"github.com/reinsdev/reins/internal/testenv"
)

// TestViewDesktop: the live view of a real desktop sandbox (gVisor, no
// network). A signed take-over link opens the page; the frame stream shows
// the real screen (bench/flipper's red window, pixel-checked) and so does
// the page's <img> in a real headless Chromium; input is
// refused until the screen is taken over, then a click through the view
// flips the window and the stream shows it blue; `sandbox show` names the
// holder; hand-back refuses input again.
func TestViewDesktop(t *testing.T) {
	s := startService(t)
	id := s.create("--image", "desktop", "--memory", "2G", "--network", "none")
	defer s.run("sandbox", "rm", id)

	bin := filepath.Join(t.TempDir(), "flipper")
	build := exec.Command("go", "build", "-o", bin, "./bench/flipper")
	build.Dir, build.Env = repoRoot(), append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building flipper: %v %s", err, out)
	}
	s.must("sandbox", "cp", bin, id+":/tmp/flipper")
	s.must("sandbox", "exec", "-d", id, "--", "sh", "-c", "/tmp/flipper > /tmp/flipper.log 2>&1")

	var link struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal([]byte(s.must("sandbox", "view", id, "--public", "--takeover", "--ttl", "10m", "--json")), &link); err != nil {
		t.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 60 * time.Second}
	resp, err := c.Get(link.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Security-Policy") == "" || resp.Request.URL.RawQuery != "" {
		t.Fatalf("the page: %d, CSP %q, at %s", resp.StatusCode, resp.Header.Get("Content-Security-Policy"), resp.Request.URL)
	}
	base := strings.TrimSuffix(resp.Request.URL.String(), "/")
	post := func(path, body string) int {
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode
	}

	// centre reads frames until one's centre is want, within a minute.
	centre := func(want [3]uint8) {
		t.Helper()
		resp, err := c.Get(base + "/frames")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		if err != nil || resp.StatusCode != 200 {
			msg, _ := io.ReadAll(resp.Body)
			t.Fatalf("frames: %d %s", resp.StatusCode, msg)
		}
		mr := multipart.NewReader(resp.Body, params["boundary"])
		var last [3]uint8
		for {
			p, err := mr.NextPart()
			if err != nil {
				t.Fatalf("the stream ended before the centre was %v (last %v): %v", want, last, err)
			}
			data, _ := io.ReadAll(p)
			img, err := png.Decode(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("a frame is not a PNG: %v", err)
			}
			if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 800 {
				t.Fatalf("a frame of %v, want 1280x800", b)
			}
			r, g, bl, _ := img.At(640, 400).RGBA()
			if last = [3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8)}; last == want {
				return
			}
		}
	}
	red, blue := [3]uint8{255, 0, 0}, [3]uint8{0, 0, 255}
	centre(red)

	// A real browser shows the real screen from the same link.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tab := cdp.Start(t, testenv.RequiresBinary(t, "chromium", "chromium")).Open(ctx, t, link.URL)
	tab.WaitFor(ctx, t, 30*time.Second, "document.getElementById('screen').naturalWidth", "1280")

	click := `{"action":"click","x":640,"y":400}`
	if code := post("/input", click); code == 200 {
		t.Fatal("input went through before a take-over")
	}
	if code := post("/takeover", `{"by":"e2e"}`); code != 200 {
		t.Fatalf("take-over: %d", code)
	}
	var shown struct {
		Sandbox struct {
			HeldBy string `json:"held_by"`
		} `json:"sandbox"`
	}
	out := s.must("sandbox", "show", id, "--json")
	if err := json.Unmarshal([]byte(out), &shown); err != nil || shown.Sandbox.HeldBy != "e2e" {
		// show prints the sandbox itself, or wrapped: accept either shape.
		var flat struct {
			HeldBy string `json:"held_by"`
		}
		if json.Unmarshal([]byte(out), &flat); flat.HeldBy != "e2e" {
			t.Errorf("sandbox show while held: %s", out)
		}
	}
	if code := post("/input", click); code != 200 {
		t.Fatalf("a click while held: %d", code)
	}
	centre(blue)
	if code := post("/handback", ""); code != 204 {
		t.Fatalf("hand-back: %d", code)
	}
	if code := post("/input", click); code == 200 {
		t.Error("input went through after the hand-back")
	}
	if r := s.run("sandbox", "takeover", id, "--by", "cli"); r.code != 0 || !strings.Contains(r.stdout, "held by cli") {
		t.Errorf("reins sandbox takeover: %s", r)
	}
	if r := s.run("sandbox", "handback", id); r.code != 0 {
		t.Errorf("reins sandbox handback: %s", r)
	}
}
