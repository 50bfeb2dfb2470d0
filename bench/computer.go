package main

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	exclient "github.com/reinsdev/reins/executor/client"
	rimage "github.com/reinsdev/reins/image"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/manager"
)

// computer: in a desktop sandbox on gVisor (1280x800), the executor's
// screenshot (GetImage + PNG, returned over its socket) beside the pipeline
// a script would run, `xwd -root | xwdtopnm | pnmtopng` by exec with the
// PNG on its stdout; and a click's effect, the time from the click until a
// screenshot shows the pixel change, beside `xdotool click` by exec and
// the same screenshots. The clicked window is flipper (bench/flipper),
// built static here and copied in: it flips its colour on a button press.
func (b *bench) computer(rounds int) error {
	ctx := b.ctx
	images, err := rimage.NewStore(*workloadImages)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "  resolving the desktop image (built once into", *workloadImages+")")
	if _, err := images.Resolve(ctx, "desktop", nil); err != nil {
		return err
	}
	m, err := manager.New(manager.Config{
		Dir: filepath.Join(b.dir, "desk"), ExecutorPath: b.executor,
		Backends: map[string]sandbox.Backend{"gvisor": b.gv}, DefaultBackend: "gvisor",
		Images: manager.ImageStore(images), CheckInterval: time.Hour,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return err
	}
	defer m.Close()
	rec, err := m.Create(ctx, "", sandbox.Spec{Image: "desktop", Limits: sandbox.Limits{MemoryBytes: 2 << 30}}, nil)
	if err != nil {
		return err
	}
	defer m.Delete(ctx, "", rec.ID)
	ex, err := m.Client(ctx, "", rec.ID)
	if err != nil {
		return err
	}
	hello, err := ex.Hello(ctx)
	if err != nil {
		return err
	}
	if hello.Display == nil {
		return fmt.Errorf("the desktop sandbox's executor has no display: the manager did not pass --display")
	}

	// The first call starts Xvfb and the window manager.
	t0 := time.Now()
	if _, err := ex.Computer(ctx, &executorv1.ComputerRequest{Action: "screenshot"}); err != nil {
		return err
	}
	start := time.Since(t0)
	t0 = time.Now()
	if err := execTrue(ctx, ex); err != nil {
		return err
	}
	b.add("desktop: first computer call (starts Xvfb + window manager, screenshot)", ms(start), ms(time.Since(t0))+" exec `true`", ratio(start, time.Since(t0)), "")

	if err := b.browserPage(ex); err != nil {
		return err
	}
	if err := b.screenshots(ex, rounds); err != nil {
		return err
	}
	chromium, err := b.chromiumClicks(ex, rounds)
	if err != nil {
		return err
	}
	return b.clicks(ex, rounds, chromium)
}

// benchPage is what Chromium shows during the screenshots: text in several
// sizes and colours (a screenshot's usual content, as PNG sees it) and a
// block that changes colour when clicked.
const benchPage = `<!doctype html><html><head><meta charset="utf-8"><style>
body{margin:0;font-family:sans-serif;background:#fafafa;color:#222}
#flip{height:300px;background:#00c000;color:#fff;font-size:40px;padding:20px}
#flip.on{background:#c000c0}
p{margin:8px 20px;font-size:15px;line-height:1.4}
h2{margin:8px 20px;color:#2255aa}
</style></head><body>
<div id="flip" onclick="this.classList.toggle('on')">Click me — the block changes colour</div>
<h2>Computer use, measured</h2>
` + "<p>" + loremIpsum + "</p><p style=\"color:#a33\">" + loremIpsum + "</p><p style=\"font-size:12px\">" + loremIpsum + loremIpsum + "</p>" + `
</body></html>`

const loremIpsum = "Agents read web pages all day, so every page may carry an instruction that is not the user's. " +
	"The executor takes screenshots with GetImage and encodes them as PNG; clicks and keys go through XTEST. " +
	"Ünïcødé text — 日本語のテキスト — and numbers 0123456789 fill the lines as a real page's would. "

// browserPage starts Chromium on benchPage and waits until it shows.
func (b *bench) browserPage(ex *exclient.Client) error {
	ctx := b.ctx
	if err := ex.WriteFile(ctx, "/tmp/bench.html", []byte(benchPage), 0o644); err != nil {
		return err
	}
	if _, err := ex.Start(ctx, &executorv1.ExecRequest{Argv: []string{"sh", "-c", "browser file:///tmp/bench.html > /tmp/browser.log 2>&1"}, Background: true}); err != nil {
		return err
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := ex.Computer(ctx, &executorv1.ComputerRequest{Action: "screenshot"})
		if err != nil {
			return err
		}
		img, err := checkPNG(resp.Png, 1280, 800)
		if err != nil {
			return err
		}
		if near(rgb8(img, 640, 300), [3]uint8{0, 192, 0}) && len(resp.Png) > 20<<10 {
			return nil
		}
		if time.Now().After(deadline) {
			log, _ := ex.ReadFile(ctx, "/tmp/browser.log")
			return fmt.Errorf("Chromium did not show the page in 90 s (the screen's centre is %v): %.2000s", rgb8(img, 640, 300), log)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// near reports whether two colours are within a few levels of each other
// (a browser's colour handling may shift them).
func near(a, b [3]uint8) bool {
	for i := range a {
		if d := int(a[i]) - int(b[i]); d < -12 || d > 12 {
			return false
		}
	}
	return true
}

func (b *bench) screenshots(ex *exclient.Client, rounds int) error {
	ctx := b.ctx
	pipeline := "xwd -root -silent | xwdtopnm 2>/dev/null | pnmtopng 2>/dev/null"
	var ours, base []time.Duration
	var oursSize, baseSize int
	for i := 0; i < rounds+2; i++ {
		t0 := time.Now()
		resp, err := ex.Computer(ctx, &executorv1.ComputerRequest{Action: "screenshot"})
		if err != nil {
			return err
		}
		d := time.Since(t0)
		if _, err := checkPNG(resp.Png, 1280, 800); err != nil {
			return fmt.Errorf("the executor's screenshot: %w", err)
		}
		t0 = time.Now()
		out, errOut, exit, err := ex.Run(ctx, "sh", "-c", pipeline)
		if err != nil || exit.ExitCode != 0 {
			return fmt.Errorf("%s: %v %v %s", pipeline, err, exit, errOut)
		}
		db := time.Since(t0)
		if _, err := checkPNG(out, 1280, 800); err != nil {
			return fmt.Errorf("%s: %w", pipeline, err)
		}
		if i >= 2 { // warm both first
			ours, base = append(ours, d), append(base, db)
			oursSize, baseSize = len(resp.Png), len(out)
		}
	}
	b.add("desktop: screenshot 1280x800 PNG of Chromium on a page, to the host (p50)", ms(pct(ours, 50))+fmt.Sprintf(" (%d KiB)", oursSize>>10),
		ms(pct(base, 50))+fmt.Sprintf(" exec `%s` (%d KiB)", pipeline, baseSize>>10), ratio(pct(ours, 50), pct(base, 50)), "≤ 0.5×")
	b.add("desktop: screenshot 1280x800 PNG (p90)", ms(pct(ours, 90)), ms(pct(base, 90))+" the same pipeline", ratio(pct(ours, 90), pct(base, 90)), "")
	return nil
}

// untilShows takes screenshots, the first being resp's, until want accepts
// one; it returns when that one came (got, for the first).
func untilShows(b *bench, ex *exclient.Client, resp *executorv1.ComputerResponse, got time.Time, want func(image.Image) bool) (time.Time, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		img, err := checkPNG(resp.Png, 1280, 800)
		if err != nil {
			return got, err
		}
		if want(img) {
			return got, nil
		}
		if time.Now().After(deadline) {
			return got, fmt.Errorf("the screen never changed as the click should have (its centre is %v)", rgb8(img, 640, 400))
		}
		if resp, err = ex.Computer(b.ctx, &executorv1.ComputerRequest{Action: "screenshot"}); err != nil {
			return got, err
		}
		got = time.Now()
	}
}

// click clicks at (x, y) with the click's own screenshot taken a
// millisecond after, and returns when a screenshot first showed what want
// accepts, and whether that was the click's own.
func click(b *bench, ex *exclient.Client, x, y int32, want func(image.Image) bool) (time.Duration, bool, error) {
	t0 := time.Now()
	resp, err := ex.Computer(b.ctx, &executorv1.ComputerRequest{Action: "left_click", Coordinate: &executorv1.Point{X: x, Y: y},
		Screenshot: true, ScreenshotDelayMs: 1})
	if err != nil {
		return 0, false, err
	}
	first := time.Now()
	got, err := untilShows(b, ex, resp, first, want)
	return got.Sub(t0), got == first, err
}

// chromiumClicks: a click on the page's block until Chromium's repaint is
// in a screenshot (what the default screenshot delay after an action is
// chosen from).
func (b *bench) chromiumClicks(ex *exclient.Client, rounds int) ([]time.Duration, error) {
	on := false
	var ds []time.Duration
	for i := 0; i < rounds+2; i++ {
		on = !on
		want := [3]uint8{0, 192, 0}
		if on {
			want = [3]uint8{192, 0, 192}
		}
		d, _, err := click(b, ex, 640, 300, func(img image.Image) bool { return near(rgb8(img, 640, 300), want) })
		if err != nil {
			return nil, fmt.Errorf("clicking Chromium's page: %w", err)
		}
		if i >= 2 {
			ds = append(ds, d)
		}
	}
	return ds, nil
}

func (b *bench) clicks(ex *exclient.Client, rounds int, chromium []time.Duration) error {
	ctx := b.ctx
	bin := filepath.Join(b.dir, "flipper")
	build := exec.Command("go", "build", "-o", bin, "./bench/flipper")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building bench/flipper: %v: %s", err, out)
	}
	prog, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	if err := ex.WriteFile(ctx, "/tmp/flipper", prog, 0o755); err != nil {
		return err
	}
	if _, err := ex.Start(ctx, &executorv1.ExecRequest{Argv: []string{"sh", "-c", "/tmp/flipper > /tmp/flipper.log 2>&1"}, Background: true}); err != nil {
		return err
	}
	flips := 0
	want := func(img image.Image) bool { // red, then blue after each odd press
		c := [3]uint8{255, 0, 0}
		if flips%2 == 1 {
			c = [3]uint8{0, 0, 255}
		}
		return rgb8(img, 640, 400) == c
	}
	first, err := ex.Computer(ctx, &executorv1.ComputerRequest{Action: "screenshot"})
	if err != nil {
		return err
	}
	if _, err := untilShows(b, ex, first, time.Now(), want); err != nil {
		return fmt.Errorf("flipper's window: %w", err)
	}
	var ours, base []time.Duration
	nextOK := 0
	for i := 0; i < rounds+2; i++ {
		flips++
		d, own, err := click(b, ex, 640, 400, want)
		if err != nil {
			return err
		}
		// xdotool: the click by exec, then the same screenshots.
		t0 := time.Now()
		if _, errOut, exit, err := ex.Run(ctx, "xdotool", "mousemove", "640", "400", "click", "1"); err != nil || exit.ExitCode != 0 {
			return fmt.Errorf("xdotool: %v %v %s", err, exit, errOut)
		}
		flips++
		resp, err := ex.Computer(ctx, &executorv1.ComputerRequest{Action: "screenshot"})
		if err != nil {
			return err
		}
		got, err := untilShows(b, ex, resp, time.Now(), want)
		if err != nil {
			return err
		}
		if i >= 2 {
			ours, base = append(ours, d), append(base, got.Sub(t0))
			if own {
				nextOK++
			}
		}
	}
	b.add("desktop: click → change visible in a screenshot (p50)", ms(pct(ours, 50))+fmt.Sprintf(" (in the click's own screenshot %d of %d)", nextOK, rounds),
		ms(pct(base, 50))+" exec `xdotool click`, then the screenshot", ratio(pct(ours, 50), pct(base, 50)), "≤ 100 ms")
	b.add("desktop: click → change visible (p90)", ms(pct(ours, 90)), ms(pct(base, 90))+" xdotool", ratio(pct(ours, 90), pct(base, 90)), "")
	b.add("desktop: click on a page → Chromium's repaint visible (p50 / p90)", ms(pct(chromium, 50))+" / "+ms(pct(chromium, 90)),
		ms(pct(ours, 50))+" / "+ms(pct(ours, 90))+" the same click on flipper", ratio(pct(chromium, 50), pct(ours, 50)), "")
	return nil
}

// checkPNG decodes a screenshot from the sandbox, which is untrusted
// bytes: its size is checked before it is decoded.
func checkPNG(b []byte, w, h int) (image.Image, error) {
	if len(b) > 16<<20 {
		return nil, fmt.Errorf("a %d-byte PNG", len(b))
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	if cfg.Width != w || cfg.Height != h {
		return nil, fmt.Errorf("a %dx%d PNG, want %dx%d", cfg.Width, cfg.Height, w, h)
	}
	return png.Decode(bytes.NewReader(b))
}

func rgb8(img image.Image, x, y int) [3]uint8 {
	r, g, b, _ := img.At(x, y).RGBA()
	return [3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8)}
}
