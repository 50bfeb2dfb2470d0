package server

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/api/reins/executor/v1/executorv1connect"
	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// The view's tests run the service's handler on a real HTTP server over a
// hand-written executor: a real Connect server on a real socket whose
// Computer call answers screenshots the test draws (or hostile bytes) and
// records the input it gets. (The real executor's screenshots of a real X
// server are covered by the e2e test of the desktop.)

const viewAdmin = "reins_view-admin"

// screenExec is the hand-written executor.
type screenExec struct {
	executorv1connect.UnimplementedExecutorHandler
	mu     sync.Mutex
	png    []byte // what screenshot answers
	inputs []*executorv1.ComputerRequest
	shots  atomic.Int64
}

func (e *screenExec) setPNG(b []byte) {
	e.mu.Lock()
	e.png = b
	e.mu.Unlock()
}

func (e *screenExec) Computer(ctx context.Context, req *connect.Request[executorv1.ComputerRequest]) (*connect.Response[executorv1.ComputerResponse], error) {
	if req.Header().Get("Authorization") != "Bearer exec-token" {
		return nil, connect.NewError(connect.CodeUnauthenticated, nil)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if req.Msg.Action == "screenshot" {
		e.shots.Add(1)
		return connect.NewResponse(&executorv1.ComputerResponse{Png: e.png, Width: 64, Height: 40}), nil
	}
	e.inputs = append(e.inputs, req.Msg)
	return connect.NewResponse(&executorv1.ComputerResponse{Cursor: req.Msg.Coordinate}), nil
}

func (e *screenExec) input() []*executorv1.ComputerRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*executorv1.ComputerRequest(nil), e.inputs...)
}

// execConn is the Executor the server gets: its transport dials the
// hand-written executor's socket.
type execConn struct {
	Executor // the calls the view does not make
	tr       http.RoundTripper
}

func (c execConn) Token() string                      { return "exec-token" }
func (c execConn) Transport(string) http.RoundTripper { return c.tr }

// viewBoxes are running desktop sandboxes, by id, with their tenant.
type viewBoxes struct {
	Lifecycle
	ex      Executor
	mu      sync.Mutex
	boxes   map[string]sandbox.Info
	lookups []string
}

func (v *viewBoxes) Get(_ context.Context, tenant, id string) (sandbox.Info, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.lookups = append(v.lookups, id)
	info, ok := v.boxes[id]
	if !ok || tenant != "" && info.Tenant != tenant {
		return sandbox.Info{}, fmt.Errorf("sandbox %s not found: %w", id, errdefs.ErrNotFound)
	}
	info.HeldBy = ""
	return info, nil
}

func (v *viewBoxes) Executor(ctx context.Context, tenant, id string) (Executor, error) {
	if _, err := v.Get(ctx, tenant, id); err != nil {
		return nil, err
	}
	return v.ex, nil
}

// heldScreens is a hand-written Holds (the manager's own is tested in
// sandbox/manager): one holder per id.
type heldScreens struct {
	mu sync.Mutex
	by map[string]sandbox.Hold
}

func (h *heldScreens) Hold(_ context.Context, _, id, by string) (sandbox.Hold, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.by == nil {
		h.by = map[string]sandbox.Hold{}
	}
	hd := sandbox.Hold{By: by, Since: time.Now(), Last: time.Now()}
	h.by[id] = hd
	return hd, nil
}

func (h *heldScreens) HandBack(_ context.Context, _, id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.by, id)
	return nil
}

func (h *heldScreens) Holding(id string) (sandbox.Hold, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hd, ok := h.by[id]
	return hd, ok
}

func (h *heldScreens) KeepHeld(id string) bool {
	_, ok := h.Holding(id)
	return ok
}

type viewEnv struct {
	url   string
	srv   *Server
	exec  *screenExec
	boxes *viewBoxes
	ports *Ports
}

// newViewEnv serves sandboxes d1 (acme's) and d2 (beta's), each with a
// 1280x800 screen, whose screen is first a 64x40 red PNG.
func newViewEnv(t *testing.T) *viewEnv {
	t.Helper()
	ex := &screenExec{png: solidPNG(t, 64, 40, color.RGBA{255, 0, 0, 255})}
	path, h := executorv1connect.NewExecutorHandler(ex)
	mux := http.NewServeMux()
	mux.Handle(path, h)
	exSrv := httptest.NewServer(mux)
	t.Cleanup(exSrv.Close)
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", exSrv.Listener.Addr().String())
	}}
	t.Cleanup(tr.CloseIdleConnections)
	boxes := &viewBoxes{ex: execConn{tr: tr}, boxes: map[string]sandbox.Info{
		"d1": {ID: "d1", Tenant: "acme", State: sandbox.StateRunning, Screen: "1280x800"},
		"d2": {ID: "d2", Tenant: "beta", State: sandbox.StateRunning, Screen: "1280x800"},
	}}
	ports := &Ports{Domain: "localhost", Key: []byte("0123456789abcdef0123456789abcdef")}
	s := New(boxes, viewAdmin, nil).WithPorts(ports).WithHolds(&heldScreens{})
	s.viewInterval = 20 * time.Millisecond
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	ports.ServicePort = port
	return &viewEnv{url: srv.URL, srv: s, exec: ex, boxes: boxes, ports: ports}
}

func solidPNG(t testing.TB, w, h int, c color.Color) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, c)
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// do sends a request with the admin's token (auth "") or the given
// Authorization or Cookie header ("Cookie: ..."), never following
// redirects.
func (e *viewEnv) do(t *testing.T, method, path, auth, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case auth == "":
		req.Header.Set("Authorization", "Bearer "+viewAdmin)
	case strings.HasPrefix(auth, "Cookie: "):
		req.Header.Set("Cookie", strings.TrimPrefix(auth, "Cookie: "))
	case auth != "none":
		req.Header.Set("Authorization", auth)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestViewPage(t *testing.T) {
	e := newViewEnv(t)
	resp := e.do(t, "GET", "/view/d1", "none", "")
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("page: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for k, want := range map[string]string{"Content-Security-Policy": viewCSP, "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY"} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("page %s: %q, want %q", k, got, want)
		}
	}
	if !strings.Contains(viewCSP, "script-src 'self';") || strings.Contains(viewCSP, "unsafe") {
		t.Errorf("the CSP lets inline script run: %s", viewCSP)
	}
	if !bytes.Contains(body, []byte(`data-sandbox="d1"`)) || bytes.Contains(body, []byte("<script>")) {
		t.Errorf("page body: %s", body)
	}
	js := e.do(t, "GET", "/view/-/view.js", "none", "")
	if js.StatusCode != 200 || js.Header.Get("Content-Type") != "text/javascript; charset=utf-8" || js.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("script: %d %q %q", js.StatusCode, js.Header.Get("Content-Type"), js.Header.Get("X-Content-Type-Options"))
	}
	// Without credentials the page loads, but nothing of the sandbox does.
	if resp := e.do(t, "GET", "/view/d1/state", "none", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("state without credentials: %d, want 401", resp.StatusCode)
	}
}

// viewLink asks ViewURL for a link and returns its value.
func (e *viewEnv) viewLink(t *testing.T, id string, public, takeover bool) string {
	t.Helper()
	ctx := withTenant(context.Background(), "")
	resp, err := e.srv.ViewURL(ctx, connect.NewRequest(&reinsv1.ViewURLRequest{Id: id, Public: public, Takeover: takeover}))
	if err != nil {
		t.Fatal(err)
	}
	prefix := e.ports.viewBase() + "/view/" + id
	if !strings.HasPrefix(resp.Msg.Url, prefix) {
		t.Fatalf("view URL %q, want %s…", resp.Msg.Url, prefix)
	}
	_, link, _ := strings.Cut(resp.Msg.Url, "?"+viewLinkParam+"=")
	return link
}

// A signed link works for its sandbox only, until it expires; a watching
// link cannot take over, a take-over link can.
func TestViewLinks(t *testing.T) {
	e := newViewEnv(t)
	link := e.viewLink(t, "d1", true, false)
	resp := e.do(t, "GET", "/view/d1?"+viewLinkParam+"="+link, "none", "")
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/view/d1" {
		t.Fatalf("opening the link: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == viewLinkCookie {
			cookie = c
		}
	}
	if cookie == nil || cookie.Path != "/view/d1" || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("the link's cookie: %+v", cookie)
	}
	jar := "Cookie: " + viewLinkCookie + "=" + link
	if resp := e.do(t, "GET", "/view/d1/state", jar, ""); resp.StatusCode != 200 {
		t.Errorf("state with the link: %d", resp.StatusCode)
	}
	if resp := e.do(t, "GET", "/view/d2/state", jar, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("d1's link on d2: %d, want 401", resp.StatusCode)
	}
	if resp := e.do(t, "GET", "/view/d2?"+viewLinkParam+"="+link, "none", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("opening d1's link as d2's: %d, want 401", resp.StatusCode)
	}
	if resp := e.do(t, "POST", "/view/d1/takeover", jar, "{}"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a watching link's take-over: %d, want 403", resp.StatusCode)
	}
	take := "Cookie: " + viewLinkCookie + "=" + e.viewLink(t, "d1", true, true)
	if resp := e.do(t, "POST", "/view/d1/takeover", take, `{"by":"ana"}`); resp.StatusCode != 200 {
		t.Errorf("a take-over link's take-over: %d", resp.StatusCode)
	}
	if h, _ := e.srv.holds.Holding("d1"); h.By != "ana" {
		t.Errorf("held by %q after the link's take-over, want ana", h.By)
	}

	// Expired.
	old := e.ports.signView("d1", true, time.Now().Add(-time.Second))
	if resp := e.do(t, "GET", "/view/d1?"+viewLinkParam+"="+old, "none", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("an expired link: %d, want 401", resp.StatusCode)
	}
	if resp := e.do(t, "GET", "/view/d1/state", "Cookie: "+viewLinkCookie+"="+old, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("an expired link's cookie: %d, want 401", resp.StatusCode)
	}
	// A token-only URL has no link; a take-over without public is refused.
	if l := e.viewLink(t, "d1", false, false); l != "" {
		t.Errorf("a token URL carries a link: %q", l)
	}
	_, err := e.srv.ViewURL(withTenant(context.Background(), ""), connect.NewRequest(&reinsv1.ViewURLRequest{Id: "d1", Takeover: true}))
	if !errorsIs(err, errdefs.ErrInvalidArgument) {
		t.Errorf("takeover without public: %v", err)
	}
}

func errorsIs(err, kind error) bool { return errdefs.Kind(err) == kind }

// The token from the page's fragment becomes a cookie for that view.
func TestViewSession(t *testing.T) {
	e := newViewEnv(t)
	resp := e.do(t, "POST", "/view/d1/session", "", "")
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == viewTokenCookie {
			cookie = c
		}
	}
	if resp.StatusCode != http.StatusNoContent || cookie == nil || cookie.Path != "/view/d1" || !cookie.HttpOnly || cookie.Value != viewAdmin {
		t.Fatalf("session: %d %+v", resp.StatusCode, cookie)
	}
	if resp := e.do(t, "GET", "/view/d1/state", "Cookie: "+viewTokenCookie+"="+viewAdmin, ""); resp.StatusCode != 200 {
		t.Errorf("state with the token cookie: %d", resp.StatusCode)
	}
	if resp := e.do(t, "POST", "/view/d1/session", "Bearer wrong", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a session from a bad token: %d, want 401", resp.StatusCode)
	}
	// A cross-site page cannot post with the view's cookies.
	req, _ := http.NewRequest("POST", e.url+"/view/d1/takeover", strings.NewReader("{}"))
	req.Header.Set("Cookie", viewTokenCookie+"="+viewAdmin)
	req.Header.Set("Origin", "http://evil.example")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("a cross-site take-over: %v %v, want 403", resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}
}

// frames reads the stream's parts, giving each PNG to got until it says
// stop.
func readFrames(t *testing.T, resp *http.Response, got func(part []byte) bool) {
	t.Helper()
	mt, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/x-mixed-replace" {
		t.Fatalf("frames: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	mr := multipart.NewReader(resp.Body, params["boundary"])
	for {
		p, err := mr.NextPart()
		if err != nil {
			t.Fatalf("next frame: %v", err)
		}
		if p.Header.Get("Content-Type") != "image/png" || p.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("frame headers: %v", p.Header)
		}
		data, err := io.ReadAll(p)
		if err != nil {
			t.Fatal(err)
		}
		if !got(data) {
			return
		}
	}
}

func pixel(t *testing.T, data []byte, x, y int) color.RGBA {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("a frame is not a PNG: %v", err)
	}
	r, g, b, a := img.At(x, y).RGBA()
	return color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), uint8(a >> 8)}
}

// Frames are the screen's PNGs; an unchanged screen sends no new frame,
// a change does.
func TestViewFrames(t *testing.T) {
	e := newViewEnv(t)
	resp := e.do(t, "GET", "/view/d1/frames", "", "")
	if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("stream without nosniff")
	}
	n := 0
	readFrames(t, resp, func(data []byte) bool {
		n++
		switch n {
		case 1:
			if c := pixel(t, data, 10, 10); c != (color.RGBA{255, 0, 0, 255}) {
				t.Fatalf("first frame's pixel %v, want red", c)
			}
			// Several screenshots of the same screen: no new frame.
			before := e.exec.shots.Load()
			for e.exec.shots.Load() < before+5 {
				time.Sleep(10 * time.Millisecond)
			}
			if sent := e.srv.viewFramesSent.Load(); sent != 1 {
				t.Errorf("%d frames sent for an unchanged screen, want 1", sent)
			}
			e.exec.setPNG(solidPNG(t, 64, 40, color.RGBA{0, 0, 255, 255}))
			return true
		default:
			if c := pixel(t, data, 10, 10); c != (color.RGBA{0, 0, 255, 255}) {
				t.Fatalf("frame after the change: pixel %v, want blue", c)
			}
			return false
		}
	})
	// Another tenant's sandbox: refused before any frame.
	if resp := e.do(t, "GET", "/view/nope/frames", "", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("frames of a missing sandbox: %d", resp.StatusCode)
	}
}

// Input goes through only while the screen is held; take-over and
// hand-back change that.
func TestViewInput(t *testing.T) {
	e := newViewEnv(t)
	click := `{"action":"click","x":12,"y":34}`
	if resp := e.do(t, "POST", "/view/d1/input", "", click); resp.StatusCode != http.StatusPreconditionFailed && resp.StatusCode != http.StatusBadRequest {
		t.Errorf("input without a hold: %d, want refused", resp.StatusCode)
	}
	if len(e.exec.input()) != 0 {
		t.Fatal("input reached the executor without a hold")
	}
	if resp := e.do(t, "POST", "/view/d1/takeover", "", ""); resp.StatusCode != 200 {
		t.Fatalf("take-over: %d", resp.StatusCode)
	}
	if resp := e.do(t, "POST", "/view/d1/input", "", click); resp.StatusCode != 200 {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("input while held: %d %s", resp.StatusCode, body)
	}
	for body, want := range map[string]string{
		`{"action":"click","x":1,"y":2,"count":2}`:                      "double_click",
		`{"action":"click","x":1,"y":2,"button":"right"}`:               "right_click",
		`{"action":"down","x":1,"y":2,"button":"middle"}`:               "left_mouse_down",
		`{"action":"drag","x":1,"y":2,"to_x":30,"to_y":40}`:             "left_click_drag",
		`{"action":"type","text":"héllo"}`:                              "type",
		`{"action":"key","text":"ctrl+l"}`:                              "key",
		`{"action":"scroll","x":5,"y":5,"direction":"down","amount":2}`: "scroll",
	} {
		if resp := e.do(t, "POST", "/view/d1/input", "", body); resp.StatusCode != 200 {
			t.Errorf("input %s: %d", body, resp.StatusCode)
			continue
		}
		in := e.exec.input()
		if got := in[len(in)-1].Action; got != want {
			t.Errorf("input %s reached the executor as %s, want %s", body, got, want)
		}
	}
	first := e.exec.input()[0]
	if first.Action != "left_click" || first.Coordinate.X != 12 || first.Coordinate.Y != 34 {
		t.Errorf("the click reached the executor as %v", first)
	}
	for _, bad := range []string{`{"action":"rm -rf"}`, `{"action":"type","text":""}`, `{"action":"scroll","direction":"sideways"}`, `{"action":"click","button":"fourth"}`} {
		if resp := e.do(t, "POST", "/view/d1/input", "", bad); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("input %s: %d, want 400", bad, resp.StatusCode)
		}
	}
	resp := e.do(t, "GET", "/view/d1/state", "", "")
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), `"held_by":"admin"`) {
		t.Errorf("state while held: %s", body)
	}
	if resp := e.do(t, "POST", "/view/d1/handback", "", ""); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("hand-back: %d", resp.StatusCode)
	}
	n := len(e.exec.input())
	if resp := e.do(t, "POST", "/view/d1/input", "", click); resp.StatusCode == 200 {
		t.Error("input after the hand-back went through")
	}
	if len(e.exec.input()) != n {
		t.Error("input after the hand-back reached the executor")
	}
}
