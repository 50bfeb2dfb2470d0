package computer_test

import (
	"context"
	"testing"
	"time"

	"github.com/jezek/xgb/xproto"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/executor/computer"
)

// TestHostileGrabServer: a program in the sandbox that grabs the X server
// (XGrabServer) and never lets go does not wedge the executor's computer
// calls: a call ends with an error when its context does, and the display
// serves again once the grab is gone.
func TestHostileGrabServer(t *testing.T) {
	d := newDisplay(t, 640, 480)
	pid := d.ServerPid()
	c := dial(t, d)
	if err := xproto.GrabServerChecked(c.conn).Check(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := d.Do(ctx, &executorv1.ComputerRequest{Action: "screenshot"})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a screenshot of a grabbed server succeeded")
		}
	case <-time.After(15 * time.Second):
		c.conn.Close() // let the call go, so that the test can end
		<-done
		t.Fatal("a screenshot of a grabbed server did not end with its context")
	}
	// The grabbing client gone, the display works again.
	c.conn.Close()
	if resp := do(t, d, &executorv1.ComputerRequest{Action: "screenshot"}); resp.Width != 640 {
		t.Errorf("after the grab: %dx%d", resp.Width, resp.Height)
	} else if resp.Note != "" {
		t.Errorf("after a call cut short: note %q", resp.Note)
	}
	// The call cut short did not cost the server (and its windows).
	if got := d.ServerPid(); got != pid {
		t.Errorf("the X server was started again (pid %d, was %d)", got, pid)
	}
}

// TestHostileGrabServerNoDeadline: a call whose caller gave no deadline
// (a run's computer call) still ends on a grabbed server.
func TestHostileGrabServerNoDeadline(t *testing.T) {
	defer computer.SetMaxCall(computer.SetMaxCall(2 * time.Second))
	d := newDisplay(t, 640, 480)
	c := dial(t, d)
	if err := xproto.GrabServerChecked(c.conn).Check(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := d.Do(context.Background(), &executorv1.ComputerRequest{Action: "screenshot"})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a screenshot of a grabbed server succeeded")
		}
	case <-time.After(15 * time.Second):
		c.conn.Close()
		<-done
		t.Fatal("a call without a deadline on a grabbed server did not end")
	}
	c.conn.Close()
}
