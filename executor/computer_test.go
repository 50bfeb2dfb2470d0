package executor_test

import (
	"bytes"
	"fmt"
	"image/png"
	"os"
	"slices"
	"testing"
	"time"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor"
	"github.com/reinsdev/reins/executor/computer"
	"github.com/reinsdev/reins/internal/testenv"
)

// freeDisplay is a display number no X server on this machine uses.
func freeDisplay(t *testing.T) int {
	for n := 40 + os.Getpid()%40; n < 200; n++ {
		_, err1 := os.Stat(fmt.Sprintf("/tmp/.X11-unix/X%d", n))
		_, err2 := os.Stat(fmt.Sprintf("/tmp/.X%d-lock", n))
		if os.IsNotExist(err1) && os.IsNotExist(err2) {
			return n
		}
	}
	t.Fatal("no free X display number")
	return 0
}

// TestComputer: an executor with a display says so in Hello, starts the
// X server for the first process, which finds it through DISPLAY and
// opens a window the next screenshot shows.
func TestComputer(t *testing.T) {
	testenv.RequiresBinary(t, "Xvfb", "xvfb")
	testenv.RequiresBinary(t, "xlogo", "x11-apps")
	e := newEnv(t, func(c *executor.Config) {
		c.Display = computer.Config{Width: 640, Height: 480, Number: freeDisplay(t), WindowManager: "none"}
	})
	hello, err := e.c.Hello(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if d := hello.Display; d == nil || d.Width != 640 || d.Height != 480 || d.Running {
		t.Errorf("Hello's display = %v, want 640x480, not running yet", d)
	}
	if !slices.Contains(hello.Capabilities, "computer") {
		t.Errorf("capabilities %v lack computer", hello.Capabilities)
	}
	out, _, exit := e.sh(`echo $DISPLAY; xlogo -geometry 200x100+20+30 -bg '#00ff00' -fg '#00ff00' >/dev/null 2>&1 & echo started`)
	if exit.ExitCode != 0 || out[0] != ':' {
		t.Fatalf("exec: %q, exit %v", out, exit)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := e.c.Computer(ctxT(t), &executorv1.ComputerRequest{Action: "screenshot"})
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(resp.Png))
		if err != nil {
			t.Fatal(err)
		}
		r, g, b, _ := img.At(100, 80).RGBA()
		if r>>8 == 0 && g>>8 == 255 && b>>8 == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the program's green window never showed at (100, 80): %d,%d,%d", r>>8, g>>8, b>>8)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if hello, _ := e.c.Hello(ctxT(t)); !hello.GetDisplay().GetRunning() {
		t.Error("Hello does not say the display runs")
	}
	_, err = e.c.Computer(ctxT(t), &executorv1.ComputerRequest{Action: "left_click", Coordinate: &executorv1.Point{X: 640, Y: 0}})
	wantKind(t, err, errdefs.ErrInvalidArgument, "640x480")

	// A computer call is activity: it keeps an idle sandbox alive.
	before := e.srv.LastActivity()
	time.Sleep(20 * time.Millisecond)
	if _, err := e.c.Computer(ctxT(t), &executorv1.ComputerRequest{Action: "cursor_position"}); err != nil {
		t.Fatal(err)
	}
	if !e.srv.LastActivity().After(before.Add(10 * time.Millisecond)) {
		t.Error("a computer call is not counted as activity")
	}
}

// TestNoDisplay: without a display a computer call names the image to use,
// and Hello reports none.
func TestNoDisplay(t *testing.T) {
	e := newEnv(t)
	_, err := e.c.Computer(ctxT(t), &executorv1.ComputerRequest{Action: "screenshot"})
	wantKind(t, err, errdefs.ErrFailedPrecondition, "--image desktop")
	hello, err := e.c.Hello(ctxT(t))
	if err != nil || hello.Display != nil || slices.Contains(hello.Capabilities, "computer") {
		t.Errorf("Hello without a display: %v, %v", hello, err)
	}
}

// TestDisplayWithoutXvfb: an executor given a display in an image without
// Xvfb still runs processes, and a computer call says what is missing.
func TestDisplayWithoutXvfb(t *testing.T) {
	e := newEnv(t, func(c *executor.Config) {
		c.Display = computer.Config{Width: 640, Height: 480, Number: freeDisplay(t), Xvfb: "no-such-xvfb"}
	})
	for range 2 {
		if out, _, exit := e.sh("echo ok"); exit.ExitCode != 0 || out != "ok\n" {
			t.Fatalf("exec with a display that cannot start: %q %v", out, exit)
		}
	}
	_, err := e.c.Computer(ctxT(t), &executorv1.ComputerRequest{Action: "screenshot"})
	wantKind(t, err, errdefs.ErrFailedPrecondition, "lacks Xvfb", "--image desktop")
}
