package computer_test

import (
	"io"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
)

// TestHostileFakeServer: a program in the sandbox that puts its own
// listener at the display's socket (/tmp is the sandbox's to write) is
// never spoken to as the X server: the executor talks only to the Xvfb it
// started (the socket's peer is that process), so a fake server cannot
// feed it replies (xgb allocates what a reply's length says: up to 16 GiB).
func TestHostileFakeServer(t *testing.T) {
	d := newDisplay(t, 640, 480)
	path := "/tmp/.X11-unix/X" + strconv.Itoa(d.Number())
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan int, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				n, _ := io.ReadFull(c, make([]byte, 12)) // the set-up request
				got <- n
			}()
		}
	}()
	d.DropConnection() // the executor connects again: to the fake?
	resp, err := d.Do(t.Context(), &executorv1.ComputerRequest{Action: "screenshot"})
	// The X server started again (it takes its socket back) serves.
	if err != nil {
		t.Fatalf("a screenshot after the socket was taken: %v", err)
	} else if resp.Width != 640 {
		t.Errorf("screenshot %dx%d", resp.Width, resp.Height)
	}
	for {
		select {
		case n := <-got:
			if n > 0 {
				t.Fatalf("the executor sent %d bytes of X set-up to a listener that is not its X server", n)
			}
		case <-time.After(500 * time.Millisecond):
			return
		}
	}
}
