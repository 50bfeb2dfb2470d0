package computer_test

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/png"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/executor/computer"
	"github.com/reinsdev/reins/internal/testenv"
)

// The tests run a real Xvfb on a display number it picks, and check what
// the display does with a real X client (xgb) that opens windows and
// records the events they receive. The test binary is a child subreaper,
// as the executor is init in a sandbox: the X server is reaped by the
// process package's reaper waiting on any child.
func TestMain(m *testing.M) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		panic(err)
	}
	goleak.VerifyTestMain(m)
}

// newDisplay starts a display of w×h with no window manager (so windows
// stay where the test puts them) and stops it when the test ends.
func newDisplay(t *testing.T, w, h int) *computer.Display {
	t.Helper()
	testenv.RequiresBinary(t, "Xvfb", "xvfb")
	d, err := computer.New(computer.Config{Width: w, Height: h, AnyNumber: true, WindowManager: "none"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return d
}

func do(t *testing.T, d *computer.Display, req *executorv1.ComputerRequest) *executorv1.ComputerResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := d.Do(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", req.GetAction(), err)
	}
	return resp
}

func pt(x, y int) *executorv1.Point { return &executorv1.Point{X: int32(x), Y: int32(y)} }

// decode decodes a response's PNG and checks its size against the
// response's.
func decode(t *testing.T, resp *executorv1.ComputerResponse) image.Image {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(resp.Png))
	if err != nil {
		t.Fatalf("the screenshot is no PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != int(resp.Width) || b.Dy() != int(resp.Height) {
		t.Fatalf("the PNG is %dx%d, the response says %dx%d", b.Dx(), b.Dy(), resp.Width, resp.Height)
	}
	return img
}

func rgb(c color.Color) [3]uint8 {
	r, g, b, _ := c.RGBA()
	return [3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8)}
}

// client is a test X client with one window.
type client struct {
	t      *testing.T
	conn   *xgb.Conn
	root   xproto.Window
	win    xproto.Window
	events chan xgb.Event
	// keys is the keyboard mapping as the client last read it, kept up to
	// date on MappingNotify as real clients do (by the event reader only).
	keys *mapping
}

type mapping struct {
	min  xproto.Keycode
	per  int
	syms []xproto.Keysym
}

func dial(t *testing.T, d *computer.Display) *client {
	t.Helper()
	nc, err := net.Dial("unix", "/tmp/.X11-unix/X"+strconv.Itoa(d.Number()))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := xgb.NewConnNet(nc)
	if err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, conn: conn, root: xproto.Setup(conn).DefaultScreen(conn).Root, events: make(chan xgb.Event, 4096)}
	c.keys = c.readMapping()
	go func() {
		defer close(c.events)
		for {
			ev, err := conn.WaitForEvent()
			if ev == nil && err == nil {
				return
			}
			if err != nil {
				continue
			}
			switch e := ev.(type) {
			case xproto.MappingNotifyEvent:
				if m := c.readMapping(); m != nil {
					c.keys = m // before the events after it, as a real client does
				}
				continue
			case xproto.KeyPressEvent:
				ev = keyPress{e, c.keys.keysym(e.Detail, e.State)}
			}
			c.events <- ev
		}
	}()
	t.Cleanup(func() {
		conn.Close()
		for range c.events {
		}
	})
	return c
}

func (c *client) readMapping() *mapping {
	setup := xproto.Setup(c.conn)
	n := int(setup.MaxKeycode) - int(setup.MinKeycode) + 1
	r, err := xproto.GetKeyboardMapping(c.conn, setup.MinKeycode, byte(n)).Reply()
	if err != nil {
		return nil
	}
	return &mapping{min: setup.MinKeycode, per: int(r.KeysymsPerKeycode), syms: r.Keysyms}
}

// keyPress is a key press with the keysym it meant when it came.
type keyPress struct {
	xproto.KeyPressEvent
	Keysym xproto.Keysym
}

// keysym is what a key press means under the mapping as it was then.
func (m *mapping) keysym(code xproto.Keycode, state uint16) xproto.Keysym {
	row := m.syms[int(code-m.min)*m.per:][:m.per]
	if state&xproto.ModMaskShift != 0 && m.per > 1 && row[1] != 0 {
		return row[1]
	}
	return row[0]
}

// window opens an override-redirect window at (x, y), w×h, filled with
// pixel (0xRRGGBB), takes the keyboard focus and waits until it shows.
func (c *client) window(x, y, w, h int, pixel uint32) {
	t := c.t
	t.Helper()
	win, err := xproto.NewWindowId(c.conn)
	if err != nil {
		t.Fatal(err)
	}
	mask := uint32(xproto.EventMaskExposure | xproto.EventMaskButtonPress | xproto.EventMaskButtonRelease |
		xproto.EventMaskKeyPress | xproto.EventMaskKeyRelease | xproto.EventMaskPointerMotion)
	err = xproto.CreateWindowChecked(c.conn, 24, win, c.root, int16(x), int16(y), uint16(w), uint16(h), 0,
		xproto.WindowClassInputOutput, xproto.Setup(c.conn).DefaultScreen(c.conn).RootVisual,
		xproto.CwBackPixel|xproto.CwOverrideRedirect|xproto.CwEventMask, []uint32{pixel, 1, mask}).Check()
	if err != nil {
		t.Fatal(err)
	}
	if err := xproto.MapWindowChecked(c.conn, win).Check(); err != nil {
		t.Fatal(err)
	}
	c.win = win
	c.wait(func(ev xgb.Event) bool { _, ok := ev.(xproto.ExposeEvent); return ok })
	if err := xproto.SetInputFocusChecked(c.conn, xproto.InputFocusPointerRoot, win, xproto.TimeCurrentTime).Check(); err != nil {
		t.Fatal(err)
	}
}

// wait returns the first event match accepts, failing after 10 s.
func (c *client) wait(match func(xgb.Event) bool) xgb.Event {
	c.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-c.events:
			if !ok {
				c.t.Fatal("the X connection closed")
			}
			if match(ev) {
				return ev
			}
		case <-timeout:
			c.t.Fatal("timed out waiting for an X event")
		}
	}
}

// drain returns the events that arrive within quiet of each other.
func (c *client) drain(quiet time.Duration) []xgb.Event {
	var out []xgb.Event
	for {
		select {
		case ev, ok := <-c.events:
			if !ok {
				return out
			}
			out = append(out, ev)
		case <-time.After(quiet):
			return out
		}
	}
}
