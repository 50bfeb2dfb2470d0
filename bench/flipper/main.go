// Command flipper is the bench's tiny X client (go run ./bench -only
// computer copies it, built static, into a desktop sandbox): a window
// filling the screen in one colour that flips to the other on every button
// press, so a click's effect is a pixel change a screenshot shows. It
// prints "ready" once its window is shown.
package main

import (
	"fmt"
	"os"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
)

// The two colours (0xRRGGBB): red, then blue after the first press.
var colours = [2]uint32{0xff0000, 0x0000ff}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "flipper:", err)
		os.Exit(1)
	}
}

func run() error {
	conn, err := xgb.NewConn()
	if err != nil {
		return err
	}
	defer conn.Close()
	screen := xproto.Setup(conn).DefaultScreen(conn)
	win, err := xproto.NewWindowId(conn)
	if err != nil {
		return err
	}
	mask := uint32(xproto.EventMaskExposure | xproto.EventMaskButtonPress)
	// Override-redirect: the window is where it is put (the whole screen),
	// whatever the window manager would do.
	if err := xproto.CreateWindowChecked(conn, screen.RootDepth, win, screen.Root, 0, 0,
		screen.WidthInPixels, screen.HeightInPixels, 0, xproto.WindowClassInputOutput, screen.RootVisual,
		xproto.CwBackPixel|xproto.CwOverrideRedirect|xproto.CwEventMask, []uint32{colours[0], 1, mask}).Check(); err != nil {
		return err
	}
	if err := xproto.MapWindowChecked(conn, win).Check(); err != nil {
		return err
	}
	shown, flips := false, 0
	for {
		ev, xerr := conn.WaitForEvent()
		if ev == nil && xerr == nil {
			return fmt.Errorf("the X connection closed")
		}
		switch ev.(type) {
		case xproto.ExposeEvent:
			if !shown {
				shown = true
				fmt.Println("ready")
			}
		case xproto.ButtonPressEvent:
			flips++
			xproto.ChangeWindowAttributes(conn, win, xproto.CwBackPixel, []uint32{colours[flips%2]})
			xproto.ClearArea(conn, false, win, 0, 0, 0, 0)
		}
	}
}
