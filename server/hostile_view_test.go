package server

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A screenshot over MaxFrameBytes is refused, not relayed: not read whole
// from the executor, no frame sent.
func TestHostileViewHugeFrame(t *testing.T) {
	e := newViewEnv(t)
	huge := append(pngHeader(64, 40), make([]byte, MaxFrameBytes)...)
	e.exec.setPNG(huge)
	resp := e.do(t, "GET", "/view/d1/frames", "", "")
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode == 200 || strings.HasPrefix(resp.Header.Get("Content-Type"), "multipart/") {
		t.Fatalf("a %d-byte screenshot: %d %s, want refused", len(huge), resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if !strings.Contains(string(body), "MiB") || e.srv.viewFramesSent.Load() != 0 {
		t.Errorf("refusal: %s (%d frames sent)", body, e.srv.viewFramesSent.Load())
	}
}

// Bytes that are not a PNG (an HTML page, a PNG claiming a giant size)
// are not relayed: a browser would sniff or decode them.
func TestHostileViewNotPNG(t *testing.T) {
	e := newViewEnv(t)
	for name, data := range map[string][]byte{
		"html":  []byte("<html><script>alert(1)</script></html>"),
		"giant": pngHeader(1<<20, 1<<20),
		"empty": nil,
	} {
		e.exec.setPNG(data)
		resp := e.do(t, "GET", "/view/d1/frames", "", "")
		if resp.StatusCode == 200 {
			t.Errorf("%s: relayed with %s", name, resp.Header.Get("Content-Type"))
		}
	}
	if n := e.srv.viewFramesSent.Load(); n != 0 {
		t.Errorf("%d frames sent", n)
	}
}

// pngHeader is a PNG signature and IHDR chunk claiming w x h.
func pngHeader(w, h uint32) []byte {
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	ihdr := make([]byte, 17)
	copy(ihdr, "IHDR")
	binary.BigEndian.PutUint32(ihdr[4:], w)
	binary.BigEndian.PutUint32(ihdr[8:], h)
	ihdr[12], ihdr[13] = 8, 6
	binary.Write(&b, binary.BigEndian, uint32(13))
	b.Write(ihdr)
	binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(ihdr))
	return b.Bytes()
}

// A sandbox id with path characters never reaches a lookup.
func TestHostileViewID(t *testing.T) {
	e := newViewEnv(t)
	for _, p := range []string{
		"/view/..%2f..%2fetc%2fpasswd/frames", "/view/d1%2f..%2fd2/state", "/view/D1/state", "/view/d1.x/state",
		"/view/" + strings.Repeat("a", 64) + "/state", "/view/d%00/state", "/view/%2e%2e/state",
	} {
		resp := e.do(t, "GET", p, "", "")
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", p, resp.StatusCode)
		}
	}
	for _, id := range e.boxes.lookups {
		if !validID(id) {
			t.Errorf("a lookup of %q", id)
		}
	}
}

// A forged signature, a link with its kind or expiry changed, a port
// link (same key) and a link signed with another key are all refused.
func TestHostileViewForgedLinks(t *testing.T) {
	e := newViewEnv(t)
	now := time.Now()
	good := e.ports.signView("d1", false, now.Add(time.Hour))
	kind, rest, _ := strings.Cut(good, ".")
	exp, sig, _ := strings.Cut(rest, ".")
	other := &Ports{Domain: "localhost", Key: []byte("another key, another service....")}
	for name, link := range map[string]string{
		"takeover with a watch signature": "takeover." + rest,
		"a later expiry":                  kind + ".9999999999." + sig,
		"no signature":                    kind + "." + exp + ".",
		"garbage":                         "watch.x.y",
		"a port link":                     e.ports.sign("d1", 1, now.Add(time.Hour)),
		"another key":                     other.signView("d1", true, now.Add(time.Hour)),
		"empty":                           "",
	} {
		if _, _, ok := e.ports.verifyView(link, "d1", now); ok {
			t.Errorf("%s: accepted", name)
		}
		resp := e.do(t, "GET", "/view/d1/state", "Cookie: "+viewLinkCookie+"="+link, "")
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: state %d, want 401", name, resp.StatusCode)
		}
	}
	if _, _, ok := e.ports.verifyView(good, "d1", now); !ok {
		t.Error("the good link is refused")
	}
}

// A viewer that stops reading is dropped after the write timeout: the
// stream takes no more screenshots while it is stuck (nothing queues),
// and its slot is freed.
func TestHostileViewSlowViewer(t *testing.T) {
	e := newViewEnv(t)
	e.srv.viewWriteTimeout = 300 * time.Millisecond
	// A changing, incompressible screen: every screenshot is a new frame.
	noise := func() []byte {
		b := append(pngHeader(64, 40), make([]byte, 512<<10)...)
		rand.Read(b[33:])
		return b
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
				e.exec.setPNG(noise())
			}
		}
	}()
	c, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetReadBuffer(4096)
	}
	io.WriteString(c, "GET /view/d1/frames HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+viewAdmin+"\r\n\r\n")
	st, err := bufio.NewReader(c).ReadString('\n') // the status line, then nothing more is read
	if err != nil || !strings.Contains(st, "200") {
		t.Fatalf("status %q %v", st, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.srv.viewSlots.open("d1") > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the stuck viewer's stream is still open after 10s (%d frames sent)", e.srv.viewFramesSent.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	shots, sent := e.exec.shots.Load(), e.srv.viewFramesSent.Load()
	// The socket buffers hold a few frames; the rest were never taken
	// (some screenshots repeat the screen and are not sent).
	if shots > 2*sent+5 || sent > 64 {
		t.Errorf("%d screenshots and %d frames sent to a viewer that read none", shots, sent)
	}
	time.Sleep(200 * time.Millisecond)
	if s := e.exec.shots.Load(); s != shots {
		t.Errorf("screenshots went on after the stream ended: %d then %d", shots, s)
	}
}
