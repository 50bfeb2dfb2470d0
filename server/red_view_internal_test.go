package server

import (
	"image/color"
	"io"
	"mime"
	"mime/multipart"
	"testing"
	"time"
)

// A signed link reaches the screen only until it expires: a stream opened
// with it ends at the expiry, it does not go on showing the screen.
func TestViewStreamEndsAtLinkExpiry(t *testing.T) {
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
