package sandboxtool_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/png"
	"strings"
	"testing"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"

	"github.com/reinsdev/reins/executor/computer"
	"github.com/reinsdev/reins/internal/testenv"
	"github.com/reinsdev/reins/tool"
	"github.com/reinsdev/reins/tool/sandboxtool"
)

// newDisplayBox is a box whose executor has a real display (a host Xvfb
// of w×h, on a display number it picks, no window manager).
func newDisplayBox(t *testing.T, w, h int) *box {
	t.Helper()
	testenv.RequiresBinary(t, "Xvfb", "xvfb")
	return newBoxWith(t, computer.Config{Width: w, Height: h, AnyNumber: true, WindowManager: "none"})
}

func computerRun(t *testing.T, sb sandboxtool.Sandbox, input string) tool.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := find(t, "computer").Run(ctx, sb, json.RawMessage(input))
	if err != nil {
		t.Fatalf("%s: %v", input, err)
	}
	return res
}

func shotOf(t *testing.T, res tool.Result) image.Image {
	t.Helper()
	if len(res.Images) != 1 {
		t.Fatalf("%d images in %q", len(res.Images), res.Text)
	}
	img, err := png.Decode(bytes.NewReader(res.Images[0]))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func isRed(img image.Image, x, y int) bool {
	r, g, b, _ := img.At(x, y).RGBA()
	return r>>8 > 200 && g>>8 < 50 && b>>8 < 50
}

// TestComputerOnDisplay drives a real X display through the tool: a
// 1920x1080 screen is shown to the model at 1280x720, a window the test
// draws (red, on the right half) is where the screenshot says, a click at
// the model's coordinates lands on the window at the screen's, and the
// executor's own words come back for what it refuses.
func TestComputerOnDisplay(t *testing.T) {
	b := newDisplayBox(t, 1920, 1080)
	sb := b.sandbox("k")
	sb.Screen = "1920x1080"

	res := computerRun(t, sb, `{"action":"screenshot"}`)
	wantText(t, res, false, "screenshot (1280x720)")
	if img := shotOf(t, res); img.Bounds().Dx() != 1280 || img.Bounds().Dy() != 720 || isRed(img, 1000, 300) {
		t.Fatalf("first screenshot %v (red before the window?)", img.Bounds())
	}

	// A window on the right half, red, listening for button presses.
	display := strings.TrimSpace(strings.TrimSuffix(run(t, sb, "bash", map[string]any{"command": "echo $DISPLAY"}).Text, "[exit code 0]"))
	conn, err := xgb.NewConnDisplay(display)
	if err != nil {
		t.Fatalf("display %q: %v", display, err)
	}
	defer conn.Close()
	screen := xproto.Setup(conn).DefaultScreen(conn)
	win, _ := xproto.NewWindowId(conn)
	if err := xproto.CreateWindowChecked(conn, screen.RootDepth, win, screen.Root, 960, 0, 960, 1080, 0,
		xproto.WindowClassInputOutput, screen.RootVisual, xproto.CwBackPixel|xproto.CwOverrideRedirect|xproto.CwEventMask,
		[]uint32{0xff0000, 1, xproto.EventMaskExposure | xproto.EventMaskButtonPress}).Check(); err != nil {
		t.Fatal(err)
	}
	xproto.MapWindow(conn, win)
	events := make(chan xgb.Event, 16)
	go func() {
		for {
			ev, err := conn.WaitForEvent()
			if ev == nil && err == nil {
				close(events)
				return
			}
			if ev != nil {
				events <- ev
			}
		}
	}()
	waitFor := func(what string, match func(xgb.Event) bool) xgb.Event {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("the X connection closed before a %s", what)
				}
				if match(ev) {
					return ev
				}
			case <-timeout:
				t.Fatalf("no %s", what)
			}
		}
	}
	// The window is drawn when the X server gets to it: screenshots until
	// it shows (or 10 s).
	var img image.Image
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if img = shotOf(t, computerRun(t, sb, `{"action":"screenshot"}`)); isRed(img, 1000, 300) {
			break
		}
	}
	if !isRed(img, 1000, 300) || !isRed(img, 641, 10) || isRed(img, 600, 300) {
		t.Errorf("the window is not where the scaled screenshot should show it (right half red)")
	}

	// A click at the model's (1000, 300) is the screen's (1500, 450).
	res = computerRun(t, sb, `{"action":"left_click","coordinate":[1000,300]}`)
	wantText(t, res, false, "left click at (1000, 300)")
	ev := waitFor("button press", func(ev xgb.Event) bool { _, ok := ev.(xproto.ButtonPressEvent); return ok }).(xproto.ButtonPressEvent)
	if ev.Detail != 1 || abs(int(ev.RootX)-1500) > 2 || abs(int(ev.RootY)-450) > 2 {
		t.Errorf("the click reached the window as button %d at (%d, %d), want 1 at (1500, 450)", ev.Detail, ev.RootX, ev.RootY)
	}
	if len(res.Images) != 1 {
		t.Errorf("a click returned %d screenshots, want one after it", len(res.Images))
	}
	res = computerRun(t, sb, `{"action":"cursor_position"}`)
	wantText(t, res, false, "the pointer is at (1000, 300)")
	if len(res.Images) != 0 {
		t.Errorf("cursor_position returned a screenshot")
	}

	// zoom shows a region of the model's screen, at full resolution.
	res = computerRun(t, sb, `{"action":"zoom","region":[600,0,680,45]}`)
	if img := shotOf(t, res); isRed(img, 2, 2) || !isRed(img, img.Bounds().Dx()-3, 2) {
		t.Errorf("the zoom of the window's left edge is not black then red (%v): %s", img.Bounds(), res.Text)
	}

	// What the executor refuses comes back in its words.
	res = computerRun(t, sb, `{"action":"left_click","coordinate":[2000,100]}`)
	t.Log(res.Text)
	wantText(t, res, true, "1280x720")
	res = computerRun(t, sb, `{"action":"key","text":"ctrl+nosuchkey"}`)
	t.Log(res.Text)
	wantText(t, res, true, "nosuchkey")
}

func abs(x int) int { return max(x, -x) }
