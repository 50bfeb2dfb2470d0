package computer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jezek/xgb/xproto"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor/computer"
	"github.com/reinsdev/reins/internal/testenv"
)

const red, blue = 0xff0000, 0x0000ff

// TestScreenshot: a red window at a known place is at those pixels of the
// screenshot, at the screen's size and scaled to half.
func TestScreenshot(t *testing.T) {
	d := newDisplay(t, 800, 600)
	c := dial(t, d)
	c.window(100, 50, 200, 100, red)

	resp := do(t, d, &executorv1.ComputerRequest{Action: "screenshot"})
	if resp.Width != 800 || resp.Height != 600 || resp.ScreenWidth != 800 || resp.ScreenHeight != 600 {
		t.Fatalf("screenshot %dx%d of a screen of %dx%d, want 800x600 both", resp.Width, resp.Height, resp.ScreenWidth, resp.ScreenHeight)
	}
	img := decode(t, resp)
	for _, p := range [][2]int{{100, 50}, {299, 149}, {200, 100}} {
		if got := rgb(img.At(p[0], p[1])); got != [3]uint8{255, 0, 0} {
			t.Errorf("pixel %v = %v, want red (inside the window)", p, got)
		}
	}
	for _, p := range [][2]int{{99, 100}, {300, 100}, {200, 49}, {200, 150}} {
		if got := rgb(img.At(p[0], p[1])); got == [3]uint8{255, 0, 0} {
			t.Errorf("pixel %v is red, outside the window", p)
		}
	}

	half := do(t, d, &executorv1.ComputerRequest{Action: "screenshot", ScaleWidth: 400, ScaleHeight: 300})
	if half.Width != 400 || half.Height != 300 || half.ScreenWidth != 800 {
		t.Fatalf("scaled screenshot %dx%d (screen %d wide), want 400x300 of 800", half.Width, half.Height, half.ScreenWidth)
	}
	small := decode(t, half)
	if got := rgb(small.At(100, 50)); got != [3]uint8{255, 0, 0} {
		t.Errorf("scaled pixel (100, 50) = %v, want red", got)
	}
	if got := rgb(small.At(40, 50)); got == [3]uint8{255, 0, 0} {
		t.Errorf("scaled pixel (40, 50) is red, left of the window")
	}
}

// TestZoom: a region around the window, scaled up to the screen's width.
func TestZoom(t *testing.T) {
	d := newDisplay(t, 800, 600)
	c := dial(t, d)
	c.window(100, 100, 100, 100, red)
	c2 := dial(t, d)
	c2.window(200, 100, 100, 100, blue)
	// 200x100 of the screen, the red half then the blue: 800x400 at the
	// screen's size (its shape kept).
	resp := do(t, d, &executorv1.ComputerRequest{Action: "zoom", Region: []int32{100, 100, 300, 200}})
	if resp.Width != 800 || resp.Height != 400 {
		t.Fatalf("zoom is %dx%d, want 800x400", resp.Width, resp.Height)
	}
	img := decode(t, resp)
	if got := rgb(img.At(200, 200)); got != [3]uint8{255, 0, 0} {
		t.Errorf("zoom pixel (200, 200) = %v, want red", got)
	}
	if got := rgb(img.At(600, 200)); got != [3]uint8{0, 0, 255} {
		t.Errorf("zoom pixel (600, 200) = %v, want blue", got)
	}
}

// TestClick: clicks reach the window under the pointer at the right
// place with the right button, as many times as asked, and in a scaled
// space at the scaled place.
func TestClick(t *testing.T) {
	d := newDisplay(t, 800, 600)
	c := dial(t, d)
	c.window(100, 50, 200, 100, red)
	presses := func() []xproto.ButtonPressEvent {
		var out []xproto.ButtonPressEvent
		for _, ev := range c.drain(300 * time.Millisecond) {
			if b, ok := ev.(xproto.ButtonPressEvent); ok {
				out = append(out, b)
			}
		}
		return out
	}
	cases := []struct {
		action        string
		button        byte
		count         int
		at            *executorv1.Point
		scaleW, scale uint32
		wantX, wantY  int16 // in the window
	}{
		{"left_click", 1, 1, pt(150, 100), 0, 0, 50, 50},
		{"right_click", 3, 1, pt(110, 60), 0, 0, 10, 10},
		{"middle_click", 2, 1, pt(299, 149), 0, 0, 199, 99},
		{"double_click", 1, 2, pt(150, 100), 0, 0, 50, 50},
		{"triple_click", 1, 3, pt(150, 100), 0, 0, 50, 50},
		{"left_click", 1, 1, pt(75, 50), 400, 300, 51, 51}, // the centre of scaled pixel (75, 50) is screen (151, 101)
	}
	for _, tc := range cases {
		resp := do(t, d, &executorv1.ComputerRequest{Action: tc.action, Coordinate: tc.at, ScaleWidth: tc.scaleW, ScaleHeight: tc.scale})
		got := presses()
		if len(got) != tc.count {
			t.Errorf("%s at %v: %d presses, want %d", tc.action, tc.at, len(got), tc.count)
			continue
		}
		for _, b := range got {
			if b.Detail != xproto.Button(tc.button) || b.EventX != tc.wantX || b.EventY != tc.wantY {
				t.Errorf("%s at %v: button %d at (%d, %d) in the window, want button %d at (%d, %d)",
					tc.action, tc.at, b.Detail, b.EventX, b.EventY, tc.button, tc.wantX, tc.wantY)
			}
		}
		if resp.Cursor.GetX() != tc.at.X || resp.Cursor.GetY() != tc.at.Y {
			t.Errorf("%s at %v: the cursor is at %v after", tc.action, tc.at, resp.Cursor)
		}
	}
}

// TestDragAndButtons: a drag presses at the start, moves with the button
// down and releases at the end; mouse down and up take their button.
func TestDragAndButtons(t *testing.T) {
	d := newDisplay(t, 800, 600)
	c := dial(t, d)
	c.window(0, 0, 400, 400, red)
	do(t, d, &executorv1.ComputerRequest{Action: "left_click_drag", StartCoordinate: pt(10, 20), Coordinate: pt(300, 200)})
	var kinds []string
	var motions int
	for _, ev := range c.drain(300 * time.Millisecond) {
		switch e := ev.(type) {
		case xproto.ButtonPressEvent:
			kinds = append(kinds, "press")
			if e.EventX != 10 || e.EventY != 20 {
				t.Errorf("the drag pressed at (%d, %d), want (10, 20)", e.EventX, e.EventY)
			}
		case xproto.MotionNotifyEvent:
			if e.State&xproto.ButtonMask1 != 0 {
				motions++
			}
		case xproto.ButtonReleaseEvent:
			kinds = append(kinds, "release")
			if e.EventX != 300 || e.EventY != 200 {
				t.Errorf("the drag released at (%d, %d), want (300, 200)", e.EventX, e.EventY)
			}
		}
	}
	if !slices.Equal(kinds, []string{"press", "release"}) || motions < 2 {
		t.Errorf("the drag gave %v with %d motions with the button down, want a press, motions, a release", kinds, motions)
	}

	do(t, d, &executorv1.ComputerRequest{Action: "left_mouse_down", Button: "right", Coordinate: pt(50, 60)})
	do(t, d, &executorv1.ComputerRequest{Action: "left_mouse_up", Button: "right"})
	var got []string
	for _, ev := range c.drain(300 * time.Millisecond) {
		switch e := ev.(type) {
		case xproto.ButtonPressEvent:
			got = append(got, "down"+strings.Repeat("R", int(e.Detail)/3))
		case xproto.ButtonReleaseEvent:
			got = append(got, "up"+strings.Repeat("R", int(e.Detail)/3))
		}
	}
	if !slices.Equal(got, []string{"downR", "upR"}) {
		t.Errorf("right mouse down and up gave %v", got)
	}
}

// TestScroll: wheel buttons 4 and 5 (6 and 7 sideways), as many as asked,
// at the coordinate, with the modifier held.
func TestScroll(t *testing.T) {
	d := newDisplay(t, 800, 600)
	c := dial(t, d)
	c.window(0, 0, 400, 400, red)
	for _, tc := range []struct {
		dir    string
		amount uint32
		button byte
		count  int
		mods   string
	}{{"down", 0, 5, 3, ""}, {"up", 2, 4, 2, ""}, {"left", 1, 6, 1, ""}, {"right", 4, 7, 4, "shift"}} {
		do(t, d, &executorv1.ComputerRequest{Action: "scroll", Coordinate: pt(123, 45), ScrollDirection: tc.dir, ScrollAmount: tc.amount, Text: tc.mods})
		n := 0
		for _, ev := range c.drain(300 * time.Millisecond) {
			if b, ok := ev.(xproto.ButtonPressEvent); ok {
				n++
				if b.Detail != xproto.Button(tc.button) || b.EventX != 123 || b.EventY != 45 {
					t.Errorf("scroll %s: button %d at (%d, %d), want %d at (123, 45)", tc.dir, b.Detail, b.EventX, b.EventY, tc.button)
				}
				if shift := b.State&xproto.ModMaskShift != 0; shift != (tc.mods == "shift") {
					t.Errorf("scroll %s with %q: shift held = %v", tc.dir, tc.mods, shift)
				}
			}
		}
		if n != tc.count {
			t.Errorf("scroll %s %d: %d wheel clicks, want %d", tc.dir, tc.amount, n, tc.count)
		}
	}
}

// typed collects the text the window's key presses spell (keysyms as the
// mapping was when each came).
func typed(c *client) (string, []keyPress) {
	var b strings.Builder
	var presses []keyPress
	for _, ev := range c.drain(500 * time.Millisecond) {
		k, ok := ev.(keyPress)
		if !ok {
			continue
		}
		presses = append(presses, k)
		if r := computer.KeysymRune(k.Keysym); r >= 0 {
			b.WriteRune(r)
		}
	}
	return b.String(), presses
}

// TestType: text with characters the keymap lacks arrives as typed, and
// the keymap is as it was afterwards.
func TestType(t *testing.T) {
	d := newDisplay(t, 800, 600)
	c := dial(t, d)
	c.window(0, 0, 400, 400, red)
	before := c.readMapping()
	const text = "héllo wörld ✓ 日本\nTab\there: A~!"
	do(t, d, &executorv1.ComputerRequest{Action: "type", Text: text})
	if got, _ := typed(c); got != text {
		t.Errorf("typed %q, want %q", got, text)
	}
	if after := c.readMapping(); !slices.Equal(before.syms, after.syms) {
		t.Error("the keyboard mapping was not restored after typing")
	}
	// More different missing characters than there are spare keys:
	// typed in rounds.
	spare := d.SpareKeys()
	var long strings.Builder
	for r := rune(0x4e00); long.Len() < 3*(spare*2+10); r++ {
		long.WriteRune(r)
	}
	do(t, d, &executorv1.ComputerRequest{Action: "type", Text: long.String()})
	if got, _ := typed(c); got != long.String() {
		t.Errorf("typed %d characters of %d (%d spare keys): %q", len([]rune(got)), len([]rune(long.String())), spare, got)
	}
	if after := c.readMapping(); !slices.Equal(before.syms, after.syms) {
		t.Error("the keyboard mapping was not restored after typing a long text")
	}
}

// TestKey: combos press the right keysyms with the right modifiers.
func TestKey(t *testing.T) {
	d := newDisplay(t, 800, 600)
	c := dial(t, d)
	c.window(0, 0, 400, 400, red)
	cases := []struct {
		text string
		want []string // keysym:modifiers of each press
	}{
		{"ctrl+l", []string{"ffe3:0", "6c:4"}},
		{"Ctrl+L", []string{"ffe3:0", "6c:4"}},  // a capital with ctrl is the small letter
		{"shift+A", []string{"ffe1:0", "41:1"}}, // with shift it stays a capital
		{"ctrl+shift+T", []string{"ffe3:0", "ffe1:4", "54:5"}},
		{"A", []string{"ffe1:0", "41:1"}}, // alone: the capital, with Shift
		{"Return", []string{"ff0d:0"}},
		{"shift+Tab", []string{"ffe1:0", "fe20:1"}}, // Tab with Shift is ISO_Left_Tab
		{"alt+F4", []string{"ffe9:0", "ffc1:8"}},
		{"ctrl+shift+t", []string{"ffe3:0", "ffe1:4", "54:5"}}, // t with Shift is T
		{"Page_Down", []string{"ff56:0"}},
		{"KP_Enter", []string{"ff8d:0"}},
		{"super", []string{"ffeb:0"}},
		{"F13", []string{"ffca:0"}},
		{"ctrl+a Delete", []string{"ffe3:0", "61:4", "ffff:0"}},
		{"é", []string{"e9:0"}},
	}
	for _, tc := range cases {
		do(t, d, &executorv1.ComputerRequest{Action: "key", Text: tc.text})
		_, presses := typed(c)
		var got []string
		for _, k := range presses {
			got = append(got, fmt.Sprintf("%x:%d", k.Keysym, k.State&(xproto.ModMaskShift|xproto.ModMaskControl|xproto.ModMask1)))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("key %q pressed %v, want %v", tc.text, got, tc.want)
		}
	}
}

// TestHoldKey: the key is held for the duration, then released.
func TestHoldKey(t *testing.T) {
	d := newDisplay(t, 800, 600)
	c := dial(t, d)
	c.window(0, 0, 400, 400, red)
	start := time.Now()
	do(t, d, &executorv1.ComputerRequest{Action: "hold_key", Text: "shift", DurationMs: 300})
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Errorf("hold_key of 300ms returned after %v", el)
	}
	var press, release xproto.Timestamp
	for _, ev := range c.drain(300 * time.Millisecond) {
		switch e := ev.(type) {
		case keyPress:
			press = e.Time
		case xproto.KeyReleaseEvent:
			release = e.Time
		}
	}
	if press == 0 || release == 0 || release-press < 250 {
		t.Errorf("shift pressed at %d, released at %d: want it held about 300 ms", press, release)
	}
}

// TestCursorAndWait: the pointer's position, in the request's space.
func TestCursorAndWait(t *testing.T) {
	d := newDisplay(t, 800, 600)
	do(t, d, &executorv1.ComputerRequest{Action: "mouse_move", Coordinate: pt(321, 123)})
	resp := do(t, d, &executorv1.ComputerRequest{Action: "cursor_position"})
	if resp.Cursor.GetX() != 321 || resp.Cursor.GetY() != 123 {
		t.Errorf("cursor at %v, want (321, 123)", resp.Cursor)
	}
	resp = do(t, d, &executorv1.ComputerRequest{Action: "cursor_position", ScaleWidth: 400, ScaleHeight: 300})
	if resp.Cursor.GetX() != 160 || resp.Cursor.GetY() != 61 {
		t.Errorf("cursor at %v in 400x300, want (160, 61)", resp.Cursor)
	}
	start := time.Now()
	resp = do(t, d, &executorv1.ComputerRequest{Action: "wait", DurationMs: 200, Screenshot: true})
	if el := time.Since(start); el < 200*time.Millisecond || len(resp.Png) == 0 {
		t.Errorf("wait 200ms took %v and gave a %d-byte screenshot", el, len(resp.Png))
	}
}

// TestRestart: an X server that dies is started again on the next call,
// and the answer says so.
func TestRestart(t *testing.T) {
	d := newDisplay(t, 800, 600)
	d.KillServer()
	resp := do(t, d, &executorv1.ComputerRequest{Action: "screenshot"})
	if !strings.Contains(resp.Note, "X server had stopped") || resp.Width != 800 {
		t.Errorf("after the X server died: note %q, screenshot %dx%d", resp.Note, resp.Width, resp.Height)
	}
	if !d.Running() {
		t.Error("the display does not say it runs after the restart")
	}
	resp = do(t, d, &executorv1.ComputerRequest{Action: "screenshot"})
	if resp.Note != "" {
		t.Errorf("the restart is noted twice: %q", resp.Note)
	}
}

// TestWindowManager: with the default window manager (matchbox, if the
// machine has it) a new window is given the whole screen.
func TestWindowManager(t *testing.T) {
	testenv.RequiresBinary(t, "matchbox-window-manager", "matchbox-window-manager")
	testenv.RequiresBinary(t, "Xvfb", "xvfb")
	d, err := computer.New(computer.Config{Width: 800, Height: 600, AnyNumber: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	do(t, d, &executorv1.ComputerRequest{Action: "screenshot"}) // starts the X server and the window manager
	c := dial(t, d)
	win, err := xproto.NewWindowId(c.conn)
	if err != nil {
		t.Fatal(err)
	}
	screen := xproto.Setup(c.conn).DefaultScreen(c.conn)
	if err := xproto.CreateWindowChecked(c.conn, 24, win, c.root, 10, 10, 100, 100, 0, xproto.WindowClassInputOutput, screen.RootVisual,
		xproto.CwBackPixel|xproto.CwEventMask, []uint32{red, xproto.EventMaskStructureNotify}).Check(); err != nil {
		t.Fatal(err)
	}
	// The window manager may take a moment to be up: map until managed.
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		xproto.MapWindow(c.conn, win)
		for _, ev := range c.drain(300 * time.Millisecond) {
			if cf, ok := ev.(xproto.ConfigureNotifyEvent); ok && cf.Width == 800 && cf.Height == 600 {
				return
			}
		}
	}
	t.Error("the window was never given the whole screen: is the window manager running?")
}

// TestClose: Close stops the X server (it is reaped: its pid is gone) and
// later calls are refused.
func TestClose(t *testing.T) {
	d := newDisplay(t, 800, 600)
	pid := d.ServerPid()
	d.Close()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the X server (pid %d) is still there after Close: %v", pid, err)
	}
	if d.Running() {
		t.Error("the display says it runs after Close")
	}
	_, err := d.Do(context.Background(), &executorv1.ComputerRequest{Action: "screenshot"})
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("a call after Close: %v, want unavailable", err)
	}
}
