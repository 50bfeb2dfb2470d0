package computer_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jezek/xgb/xproto"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor/computer"
	"github.com/reinsdev/reins/internal/testenv"
)

// TestHostileRequests: what a model (or anyone with the executor's token)
// may send is refused with invalid_argument in words that say what is
// accepted, before anything is done: no key pressed, no sleep taken, no
// huge image made.
func TestHostileRequests(t *testing.T) {
	d := newDisplay(t, 800, 600)
	long := strings.Repeat("a", computer.MaxText+1)
	cases := []struct {
		name string
		req  *executorv1.ComputerRequest
		want []string // in the message
	}{
		{"click off the screen", &executorv1.ComputerRequest{Action: "left_click", Coordinate: pt(800, 10)}, []string{"off the screen", "800x600"}},
		{"negative", &executorv1.ComputerRequest{Action: "mouse_move", Coordinate: pt(-1, 10)}, []string{"800x600"}},
		{"off the scaled screen", &executorv1.ComputerRequest{Action: "left_click", Coordinate: pt(500, 10), ScaleWidth: 400, ScaleHeight: 300}, []string{"400x300", "0..399"}},
		{"drag ends off", &executorv1.ComputerRequest{Action: "left_click_drag", StartCoordinate: pt(1, 1), Coordinate: pt(10, 6000)}, []string{"coordinate", "800x600"}},
		{"drag without start", &executorv1.ComputerRequest{Action: "left_click_drag", Coordinate: pt(1, 1)}, []string{"start_coordinate"}},
		{"move nowhere", &executorv1.ComputerRequest{Action: "mouse_move"}, []string{"coordinate"}},
		{"unknown key", &executorv1.ComputerRequest{Action: "key", Text: "ctrl+Hyperspace"}, []string{"Hyperspace", "ctrl+l", "F1..F35", "single character"}},
		{"no key", &executorv1.ComputerRequest{Action: "key", Text: "   "}, []string{"no key"}},
		{"too many combos", &executorv1.ComputerRequest{Action: "key", Text: strings.Repeat("a ", 100)}, []string{"at most"}},
		{"huge text", &executorv1.ComputerRequest{Action: "type", Text: long}, []string{"limit of 16384"}},
		{"control character", &executorv1.ComputerRequest{Action: "type", Text: "ok\x1b[2J"}, []string{"U+001B", "key action"}},
		{"empty text", &executorv1.ComputerRequest{Action: "type"}, []string{"text"}},
		{"huge hold", &executorv1.ComputerRequest{Action: "hold_key", Text: "shift", DurationMs: 1 << 31}, []string{"limit of 1m40s"}},
		{"hold without duration", &executorv1.ComputerRequest{Action: "hold_key", Text: "shift"}, []string{"duration_ms"}},
		{"huge wait", &executorv1.ComputerRequest{Action: "wait", DurationMs: 200_000}, []string{"limit"}},
		{"huge delay", &executorv1.ComputerRequest{Action: "left_click", Screenshot: true, ScreenshotDelayMs: 1 << 30}, []string{"screenshot_delay_ms"}},
		{"scale 0x5", &executorv1.ComputerRequest{Action: "screenshot", ScaleWidth: 0, ScaleHeight: 5}, []string{"scale 0x5", "16..4096"}},
		{"scale huge", &executorv1.ComputerRequest{Action: "screenshot", ScaleWidth: 100000, ScaleHeight: 100000}, []string{"scale 100000x100000"}},
		{"region inverted", &executorv1.ComputerRequest{Action: "zoom", Region: []int32{300, 300, 100, 100}}, []string{"empty or off the screen", "800x600"}},
		{"region empty", &executorv1.ComputerRequest{Action: "zoom", Region: []int32{100, 100, 100, 200}}, []string{"empty"}},
		{"region off", &executorv1.ComputerRequest{Action: "zoom", Region: []int32{700, 500, 900, 700}}, []string{"off the screen"}},
		{"region short", &executorv1.ComputerRequest{Action: "zoom", Region: []int32{1, 2, 3}}, []string{"4 numbers"}},
		{"scroll sideways-ish", &executorv1.ComputerRequest{Action: "scroll", ScrollDirection: "diagonal"}, []string{"up, down, left or right"}},
		{"scroll forever", &executorv1.ComputerRequest{Action: "scroll", ScrollDirection: "down", ScrollAmount: 1 << 30}, []string{"limit of 100"}},
		{"bad button", &executorv1.ComputerRequest{Action: "left_mouse_down", Button: "fourth"}, []string{"left, middle or right"}},
		{"unknown modifier", &executorv1.ComputerRequest{Action: "left_click", Text: "hyper+nothing"}, []string{"unknown key"}},
		{"unknown action", &executorv1.ComputerRequest{Action: "format_disk"}, []string{"screenshot, left_click"}},
	}
	for _, tc := range cases {
		start := time.Now()
		_, err := d.Do(context.Background(), tc.req)
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want invalid_argument", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tc.name, err, w)
			}
		}
		if el := time.Since(start); el > time.Second {
			t.Errorf("%s: refused after %v: it did something first", tc.name, el)
		}
		if len(err.Error()) > 2000 {
			t.Errorf("%s: a %d-byte error (the input is quoted whole?)", tc.name, len(err.Error()))
		}
	}
}

// TestHostileHugeScreen: a screen over the pixel limit, with no scale
// asked, comes back scaled to fit it, with a note saying how, never an
// error; coordinates stay the screen's.
func TestHostileHugeScreen(t *testing.T) {
	d := newDisplay(t, 1600, 1000)
	c := dial(t, d)
	c.window(800, 500, 800, 500, red)
	resp := do(t, d, &executorv1.ComputerRequest{Action: "screenshot"})
	if int(resp.Width)*int(resp.Height) > computer.MaxPixels || resp.Width < 1300 {
		t.Errorf("screenshot %dx%d for a limit of %d pixels", resp.Width, resp.Height, computer.MaxPixels)
	}
	if !strings.Contains(resp.Note, "scaled from 1600x1000") || !strings.Contains(resp.Note, "scale_width") {
		t.Errorf("note %q does not say the screenshot was scaled and how to ask for its space", resp.Note)
	}
	img := decode(t, resp)
	w, h := int(resp.Width), int(resp.Height)
	if got := rgb(img.At(w*3/4, h*3/4)); got != [3]uint8{255, 0, 0} {
		t.Errorf("scaled pixel at three quarters = %v, want red", got)
	}
	if got := rgb(img.At(w/4, h/4)); got == [3]uint8{255, 0, 0} {
		t.Errorf("scaled pixel at a quarter is red")
	}
	// Asked for the screen's own size: the caller's choice, no limit but
	// the PNG's.
	full := do(t, d, &executorv1.ComputerRequest{Action: "screenshot", ScaleWidth: 1600, ScaleHeight: 1000})
	if full.Width != 1600 || full.Note != "" {
		t.Errorf("screenshot at the asked 1600x1000: %dx%d, note %q", full.Width, full.Height, full.Note)
	}
}

// TestHostilePNGOverLimit: a screen whose PNG is over the limit (noise
// compresses badly) is scaled down until it fits, with a note.
func TestHostilePNGOverLimit(t *testing.T) {
	d := newDisplay(t, 800, 600)
	c := dial(t, d)
	c.window(0, 0, 800, 600, 0)
	c.noise(800, 600)
	const limit = 300 << 10
	old := computer.SetMaxPNG(limit)
	defer computer.SetMaxPNG(old)
	resp := do(t, d, &executorv1.ComputerRequest{Action: "screenshot"})
	if len(resp.Png) > limit || resp.Width >= 800 {
		t.Errorf("a %d-byte PNG of %dx%d for a limit of %d", len(resp.Png), resp.Width, resp.Height, limit)
	}
	if !strings.Contains(resp.Note, "scaled from 800x600") || !strings.Contains(resp.Note, "300 KiB") {
		t.Errorf("note %q", resp.Note)
	}
	decode(t, resp)
}

// noise fills the client's window with random pixels.
func (c *client) noise(w, h int) {
	t := c.t
	gc, err := xproto.NewGcontextId(c.conn)
	if err != nil {
		t.Fatal(err)
	}
	if err := xproto.CreateGCChecked(c.conn, gc, xproto.Drawable(c.win), 0, nil).Check(); err != nil {
		t.Fatal(err)
	}
	rows := 50
	buf := make([]byte, w*rows*4)
	for y := 0; y < h; y += rows {
		for i := range buf {
			buf[i] = byte(rand.Uint32())
		}
		if err := xproto.PutImageChecked(c.conn, xproto.ImageFormatZPixmap, xproto.Drawable(c.win), gc,
			uint16(w), uint16(rows), 0, int16(y), 0, 24, buf).Check(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHostileDisplaySize: --display's value is bounded as sandbox screens
// are (320..4096 each way), in words.
func TestHostileDisplaySize(t *testing.T) {
	for _, s := range []string{"", "10x10", "5000x800", "1280x100000", "axb", "1280x800x24", "-1280x800", "1280"} {
		if _, _, err := computer.ParseSize(s); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "320..4096") {
			t.Errorf("ParseSize(%q) = %v, want invalid_argument naming the bounds", s, err)
		}
		if _, err := computer.New(computer.Config{Width: 10, Height: 100000}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("New with 10x100000: %v", err)
		}
	}
	if w, h, err := computer.ParseSize(" 1280X800 "); err != nil || w != 1280 || h != 800 {
		t.Errorf("ParseSize(1280X800) = %d, %d, %v", w, h, err)
	}
}

// TestHostileKilledConnection: a program in the sandbox cannot kill the
// executor's X connection (XKillClient names a client by one of its
// resources, and the connection owns none); a connection lost all the
// same is started again on the next call, which says so, instead of
// failing from then on.
func TestHostileKilledConnection(t *testing.T) {
	d := newDisplay(t, 800, 600)
	c := dial(t, d)
	if err := xproto.KillClientChecked(c.conn, d.ResourceBase()).Check(); err == nil {
		t.Error("KillClient of the executor's connection was accepted")
	}
	if resp := do(t, d, &executorv1.ComputerRequest{Action: "screenshot"}); resp.Note != "" {
		t.Errorf("after a refused KillClient: note %q", resp.Note)
	}
	d.DropConnection()
	resp := do(t, d, &executorv1.ComputerRequest{Action: "screenshot"})
	if resp.Width != 800 || !strings.Contains(resp.Note, "connection to the X server was lost") {
		t.Fatalf("after the connection was lost: %dx%d, note %q", resp.Width, resp.Height, resp.Note)
	}
}

// TestHostileStaleLock: a lock file left by an X server of a sandbox's
// earlier life (its root kept across a restart), naming a pid that is now
// another process (here 1, the machine's init), does not keep the display
// from starting on its number: Xvfb started with -displayfd takes no
// lock (without it, it would refuse: "Server is already active").
func TestHostileStaleLock(t *testing.T) {
	testenv.RequiresBinary(t, "Xvfb", "xvfb")
	n := freeNumber(t)
	lock := fmt.Sprintf("/tmp/.X%d-lock", n)
	if err := os.WriteFile(lock, []byte("         1\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(lock)
	d, err := computer.New(computer.Config{Width: 640, Height: 480, Number: n, WindowManager: "none"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if resp := do(t, d, &executorv1.ComputerRequest{Action: "screenshot"}); resp.Width != 640 {
		t.Errorf("screenshot %dx%d", resp.Width, resp.Height)
	}
	// On the number asked, which the sandbox's DISPLAY names, not the
	// next free one.
	if got := d.Number(); got != n {
		t.Errorf("the X server is on :%d, want :%d", got, n)
	}
}

// freeNumber is a display number with no lock file and no socket.
func freeNumber(t *testing.T) int {
	for n := 60 + os.Getpid()%100; n < 300; n++ {
		_, err1 := os.Stat(fmt.Sprintf("/tmp/.X%d-lock", n))
		_, err2 := os.Stat(fmt.Sprintf("/tmp/.X11-unix/X%d", n))
		if os.IsNotExist(err1) && os.IsNotExist(err2) {
			return n
		}
	}
	t.Fatal("no free display number")
	return 0
}
