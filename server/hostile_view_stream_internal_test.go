package server

import (
	"fmt"
	"image/color"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/reinsdev/reins/sandbox"
)

// A signed link reaches the screen only until it expires: a stream opened
// with it ends at the expiry, it does not go on showing the screen.
func TestHostileViewStreamEndsAtLinkExpiry(t *testing.T) {
	e := newViewEnv(t)
	link := e.ports.signView("d1", false, time.Now().Add(2*time.Second))
	resp := e.do(t, "GET", "/view/d1/frames", "Cookie: "+viewLinkCookie+"="+link, "")
	_, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil {
		t.Fatalf("frames: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	mr := multipart.NewReader(resp.Body, params["boundary"])
	if _, err := mr.NextPart(); err != nil {
		t.Fatalf("first frame: %v", err)
	}
	time.Sleep(3 * time.Second) // past the link's expiry
	e.exec.setPNG(solidPNG(t, 64, 40, color.RGBA{0, 255, 0, 255}))
	done := make(chan error, 1)
	go func() {
		for {
			p, err := mr.NextPart()
			if err != nil {
				done <- nil
				return
			}
			if data, _ := io.ReadAll(p); len(data) > 0 {
				done <- errFrameAfterExpiry
				return
			}
		}
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream neither ended nor sent a frame")
	}
}

var errFrameAfterExpiry = errString("a frame of the screen was sent after the link expired")

type errString string

func (e errString) Error() string { return string(e) }

// One tenant's view streams are bounded across its sandboxes, not only
// per sandbox: each holds up to two frames of MaxFrameBytes, and a tenant
// with many desktops (or anyone with their watch links) must not take the
// service's memory.
func TestHostileViewStreamsPerTenant(t *testing.T) {
	e := newViewEnv(t)
	e.srv.viewInterval = time.Second
	n := ViewersPerTenant/ViewersPerSandbox + 1
	e.boxes.mu.Lock()
	for i := range n {
		id := fmt.Sprintf("m%d", i)
		e.boxes.boxes[id] = sandbox.Info{ID: id, Tenant: "acme", State: sandbox.StateRunning, Screen: "1280x800"}
	}
	e.boxes.mu.Unlock()
	refused := 0
	for i := range n {
		for range ViewersPerSandbox {
			link := e.ports.signView(fmt.Sprintf("m%d", i), false, time.Now().Add(time.Minute))
			resp := e.do(t, "GET", fmt.Sprintf("/view/m%d/frames", i), "Cookie: "+viewLinkCookie+"="+link, "")
			if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable ||
				strings.Contains(resp.Header.Get("Content-Type"), "json") {
				refused++
			}
		}
	}
	if want := n*ViewersPerSandbox - ViewersPerTenant; refused != want {
		t.Errorf("%d streams of one tenant's %d sandboxes refused, want %d (at most %d open)", refused, n, want, ViewersPerTenant)
	}
}
