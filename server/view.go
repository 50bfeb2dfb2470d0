package server

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"connectrpc.com/connect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/api/reins/executor/v1/executorv1connect"
	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/tool"
)

// The live view (docs/decisions/0043-view-stream.md): a page on the
// service that shows a desktop sandbox's screen as a stream of the
// executor's screenshots, and lets a person take the screen over.
//
//	GET  /view/ID            the page (a signed link's ?reins_view= becomes a cookie)
//	GET  /view/ID/frames     multipart/x-mixed-replace PNG frames, changed ones only
//	GET  /view/ID/state      JSON: who holds the screen, may this viewer take over
//	POST /view/ID/session    the page's token (from the URL fragment) becomes a cookie
//	POST /view/ID/takeover   hold the screen; /handback lets go
//	POST /view/ID/input      JSON input, while the screen is held
//	GET  /view/-/view.js     the page's script and style (view.css), static
//
// Every call but the page and its static files needs the owner's token
// (Authorization or the cookie the page sets) or a signed link's cookie,
// which reaches that one sandbox only until it expires, and takes over
// only if it was made to.

// Holds is what take-over needs of the sandboxes: the manager has it.
type Holds interface {
	Hold(ctx context.Context, tenant, id, by string) (sandbox.Hold, error)
	HandBack(ctx context.Context, tenant, id string) error
	Holding(id string) (sandbox.Hold, bool)
	// KeepHeld records input on a held screen and reports whether it is.
	KeepHeld(id string) bool
}

// WithHolds serves TakeOver and the live view's take-over.
func (s *Server) WithHolds(h Holds) *Server {
	s.holds = h
	return s
}

// Bounds of the live view.
const (
	// MaxFrameBytes bounds one screenshot the executor returns: a bigger
	// one is refused before it is read whole, never relayed. A 4096x4096
	// screen of photographs is about 40 MiB as PNG; desktops are far
	// smaller (1280x800: 50-500 KiB).
	MaxFrameBytes = 16 << 20
	// ViewFrameInterval is the shortest time between two screenshots of
	// one stream (at most 10 frames a second).
	ViewFrameInterval = 100 * time.Millisecond
	// ViewersPerSandbox bounds the streams open on one sandbox at once;
	// ViewersPerTenant those on all of one tenant's sandboxes (each
	// stream holds up to two frames of MaxFrameBytes).
	ViewersPerSandbox = 8
	ViewersPerTenant  = 32
	// viewWriteTimeout is how long one frame may take to reach a viewer;
	// a viewer slower than that is dropped, nothing is queued for it.
	viewWriteTimeout = 10 * time.Second
	// maxInputBody bounds an input request; maxTypeText what one types.
	maxInputBody = 64 << 10
	maxTypeText  = 4096
	maxHolderLen = 64
)

// Cookies of the view, each for one sandbox's /view/ID path only.
const (
	viewLinkParam   = "reins_view"
	viewLinkCookie  = "reins_view_link"
	viewTokenCookie = "reins_view_token"
)

// viewAccess is what a view request may do.
type viewAccess struct {
	tenant   string // the caller's ("" : the admin, or a link, limited to id)
	takeover bool
	who      string // the holder's default name
}

var errViewCreds = errdefs.WithMessage(errdefs.ErrUnauthenticated,
	"this view needs your reins token: open the URL `reins sandbox view ID` prints, send \"Authorization: Bearer TOKEN\", or open a link from `reins sandbox view ID --public`")

// serveView answers /view/...; it reports false for other paths.
func (s *Server) serveView(w http.ResponseWriter, r *http.Request) bool {
	rest, ok := strings.CutPrefix(r.URL.Path, "/view/")
	if !ok {
		return false
	}
	id, sub, _ := strings.Cut(rest, "/")
	if id == "-" {
		serveViewStatic(w, r, sub)
		return true
	}
	if !validID(id) {
		viewText(w, http.StatusNotFound, "no such sandbox: check the URL (`reins sandbox view ID` prints it)")
		return true
	}
	if sub == "" {
		s.viewPage(w, r, id)
		return true
	}
	if r.Method != http.MethodGet && !sameOrigin(r) {
		viewText(w, http.StatusForbidden, "this request came from another site's page: open the view itself")
		return true
	}
	acc, err := s.viewCaller(r, id)
	if err != nil {
		s.writeError(w, r, err)
		return true
	}
	switch {
	case sub == "frames" && r.Method == http.MethodGet:
		s.viewFrames(w, r, id, acc)
	case sub == "state" && r.Method == http.MethodGet:
		s.viewState(w, r, id, acc)
	case sub == "session" && r.Method == http.MethodPost:
		s.viewSession(w, r, id)
	case (sub == "takeover" || sub == "handback" || sub == "input") && r.Method == http.MethodPost:
		if !acc.takeover {
			s.writeError(w, r, errdefs.WithMessage(errdefs.ErrPermissionDenied,
				"this link only watches: ask the sandbox's owner for one made with --takeover"))
			return true
		}
		switch sub {
		case "takeover":
			s.viewTakeOver(w, r, id, acc)
		case "handback":
			s.viewHandBack(w, r, id, acc)
		default:
			s.viewInput(w, r, id, acc)
		}
	default:
		viewText(w, http.StatusNotFound, "no such page of the view")
	}
	return true
}

// sameOrigin refuses a cross-site POST carried by the view's cookies: a
// browser names the page that sent it in Origin.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true // not a browser's cross-site request
	}
	u, err := url.Parse(o)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}

// viewCaller is who a request to sandbox id's view speaks for: a reins
// token (header or cookie) of the owner or the admin, or a signed link's
// cookie for id. Another tenant's sandbox is not found, as a missing one.
func (s *Server) viewCaller(r *http.Request, id string) (viewAccess, error) {
	hdr := r.Header.Get("Authorization")
	if hdr == "" {
		if c, err := r.Cookie(viewTokenCookie); err == nil {
			hdr = "Bearer " + c.Value
		}
	}
	if hdr != "" {
		tn, err := s.authenticate(r.Context(), hdr)
		if err != nil {
			return viewAccess{}, errViewCreds
		}
		if _, err := s.m.Get(r.Context(), tn, id); err != nil {
			return viewAccess{}, err
		}
		return viewAccess{tenant: tn, takeover: true, who: cmpOr(tn, "admin")}, nil
	}
	if c, err := r.Cookie(viewLinkCookie); err == nil && s.ports != nil {
		if _, takeover, ok := s.ports.verifyView(c.Value, id, time.Now()); ok {
			return viewAccess{takeover: takeover, who: "a link's viewer"}, nil
		}
	}
	return viewAccess{}, errViewCreds
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// viewPage serves the page; with a signed link it sets the link's cookie
// and redirects to the page without it, so the secret leaves the address
// bar. The page holds nothing but the id (checked: letters and digits).
func (s *Server) viewPage(w http.ResponseWriter, r *http.Request, id string) {
	if link := r.URL.Query().Get(viewLinkParam); link != "" {
		if s.ports == nil {
			viewText(w, http.StatusUnauthorized, errViewCreds.Error())
			return
		}
		expires, _, ok := s.ports.verifyView(link, id, time.Now())
		if !ok {
			viewText(w, http.StatusUnauthorized, "this view link is expired or not valid: ask for a new one (reins sandbox view ID --public)")
			return
		}
		http.SetCookie(w, &http.Cookie{Name: viewLinkCookie, Value: link, Path: "/view/" + id, Expires: expires,
			HttpOnly: true, SameSite: http.SameSiteStrictMode})
		http.Redirect(w, r, "/view/"+id, http.StatusFound)
		return
	}
	viewHeaders(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	viewPageTemplate.Execute(w, struct{ ID string }{id})
}

// viewHeaders are the page's and its answers': nothing inline runs, no
// other site frames it or is reached from it.
func viewHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", viewCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

const viewCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

var (
	//go:embed view/view.html
	viewHTML         string
	viewPageTemplate = template.Must(template.New("view").Parse(viewHTML))
	//go:embed view/view.js
	viewJS []byte
	//go:embed view/view.css
	viewCSS []byte
)

func serveViewStatic(w http.ResponseWriter, r *http.Request, name string) {
	viewHeaders(w)
	switch name {
	case "view.js":
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		w.Write(viewJS)
	case "view.css":
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		w.Write(viewCSS)
	default:
		viewText(w, http.StatusNotFound, "no such file of the view")
	}
}

func viewText(w http.ResponseWriter, code int, msg string) {
	viewHeaders(w)
	portText(w, code, msg)
}

// viewSession turns the token the page read from its URL fragment (sent
// as Authorization, checked by viewCaller) into a cookie for this
// sandbox's view only, which the <img> of the frames carries.
func (s *Server) viewSession(w http.ResponseWriter, r *http.Request, id string) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		s.writeError(w, r, errdefs.WithMessage(errdefs.ErrInvalidArgument, "a session starts from an Authorization header"))
		return
	}
	http.SetCookie(w, &http.Cookie{Name: viewTokenCookie, Value: tok, Path: "/view/" + id,
		HttpOnly: true, SameSite: http.SameSiteStrictMode})
	w.WriteHeader(http.StatusNoContent)
}

// viewState tells the page about the sandbox and its screen.
func (s *Server) viewState(w http.ResponseWriter, r *http.Request, id string, acc viewAccess) {
	rec, err := s.m.Get(r.Context(), acc.tenant, id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	st := struct {
		Sandbox     string `json:"sandbox"`
		State       string `json:"state"`
		Screen      string `json:"screen"`
		HeldBy      string `json:"held_by"`
		HeldSince   int64  `json:"held_since_unix_ms,omitempty"`
		CanTakeOver bool   `json:"can_take_over"`
	}{Sandbox: rec.ID, State: string(rec.State), Screen: rec.Screen, CanTakeOver: acc.takeover && s.holds != nil}
	if s.holds != nil {
		if h, ok := s.holds.Holding(id); ok {
			st.HeldBy, st.HeldSince = h.By, h.Since.UnixMilli()
		}
	}
	viewJSON(w, st)
}

func viewJSON(w http.ResponseWriter, v any) {
	viewHeaders(w)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func (s *Server) needHolds() error {
	if s.holds == nil {
		return errdefs.WithMessage(errdefs.ErrUnimplemented, "this service cannot hand sandboxes' screens to people")
	}
	return nil
}

func (s *Server) viewTakeOver(w http.ResponseWriter, r *http.Request, id string, acc viewAccess) {
	var body struct {
		By string `json:"by"`
	}
	if err := readViewJSON(r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	by, err := holderName(cmpOr(body.By, acc.who))
	if err == nil {
		err = s.needHolds()
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	h, err := s.holds.Hold(r.Context(), acc.tenant, id, by)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	viewJSON(w, map[string]any{"held_by": h.By, "held_since_unix_ms": h.Since.UnixMilli()})
}

func (s *Server) viewHandBack(w http.ResponseWriter, r *http.Request, id string, acc viewAccess) {
	if err := s.needHolds(); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.holds.HandBack(r.Context(), acc.tenant, id); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// holderName checks a holder's name: it is shown on the page and in runs'
// logs, so it is short and printable.
func holderName(by string) (string, error) {
	by = strings.TrimSpace(by)
	if len([]rune(by)) > maxHolderLen {
		return "", errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf("a holder's name has at most %d characters", maxHolderLen))
	}
	for _, c := range by {
		if !unicode.IsPrint(c) {
			return "", errdefs.WithMessage(errdefs.ErrInvalidArgument, "a holder's name must be printable text")
		}
	}
	return by, nil
}

func readViewJSON(r *http.Request, v any) error {
	data, err := io.ReadAll(io.LimitReader(r.Body, maxInputBody+1))
	if err != nil {
		return fmt.Errorf("reading the request: %w", errdefs.ErrInvalidArgument)
	}
	if len(data) > maxInputBody {
		return errdefs.WithMessage(errdefs.ErrTooLarge, fmt.Sprintf("a view request has at most %d bytes", maxInputBody))
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return errdefs.WithMessage(errdefs.ErrInvalidArgument, "the request is not the JSON the view sends: "+err.Error())
	}
	return nil
}

// viewInput is one input event from the view, in screen pixels.
type viewInput struct {
	Action    string `json:"action"` // click, move, drag, down, up, type, key, scroll
	X         int32  `json:"x"`
	Y         int32  `json:"y"`
	ToX       int32  `json:"to_x"` // drag's end
	ToY       int32  `json:"to_y"`
	Button    string `json:"button"` // left (default), right, middle
	Count     int    `json:"count"`  // click: 1 (default), 2, 3
	Text      string `json:"text"`   // type's text; key's combo ("ctrl+l")
	Direction string `json:"direction"`
	Amount    uint32 `json:"amount"`
}

// computerRequest maps an input event to the executor's call.
func (in viewInput) computerRequest() (*executorv1.ComputerRequest, error) {
	at := &executorv1.Point{X: in.X, Y: in.Y}
	req := &executorv1.ComputerRequest{Coordinate: at}
	bad := func(msg string) error { return errdefs.WithMessage(errdefs.ErrInvalidArgument, msg) }
	switch in.Button {
	case "", "left", "right", "middle":
	default:
		return nil, bad(fmt.Sprintf("button %.20q: choose left, right or middle", in.Button))
	}
	switch in.Action {
	case "click":
		switch {
		case in.Button == "right":
			req.Action = "right_click"
		case in.Button == "middle":
			req.Action = "middle_click"
		case in.Count == 2:
			req.Action = "double_click"
		case in.Count == 3:
			req.Action = "triple_click"
		default:
			req.Action = "left_click"
		}
	case "move":
		req.Action = "mouse_move"
	case "drag":
		req.Action, req.StartCoordinate, req.Coordinate = "left_click_drag", at, &executorv1.Point{X: in.ToX, Y: in.ToY}
	case "down", "up":
		req.Action, req.Button = "left_mouse_"+in.Action, in.Button
	case "type", "key":
		if in.Text == "" || len(in.Text) > maxTypeText {
			return nil, bad(fmt.Sprintf("%s needs text of 1 to %d bytes", in.Action, maxTypeText))
		}
		req.Action, req.Text, req.Coordinate = in.Action, in.Text, nil
	case "scroll":
		switch in.Direction {
		case "up", "down", "left", "right":
		default:
			return nil, bad(fmt.Sprintf("scroll direction %.20q: choose up, down, left or right", in.Direction))
		}
		req.Action, req.ScrollDirection, req.ScrollAmount = "scroll", in.Direction, min(max(in.Amount, 1), 50)
	default:
		return nil, bad(fmt.Sprintf("input %.20q: choose click, move, drag, down, up, type, key or scroll", in.Action))
	}
	return req, nil
}

// viewInput sends a person's input to the screen they hold.
func (s *Server) viewInput(w http.ResponseWriter, r *http.Request, id string, acc viewAccess) {
	var in viewInput
	if err := readViewJSON(r, &in); err != nil {
		s.writeError(w, r, err)
		return
	}
	req, err := in.computerRequest()
	if err == nil {
		err = s.needHolds()
	}
	if err == nil && !s.holds.KeepHeld(id) {
		err = errdefs.WithMessage(errdefs.ErrFailedPrecondition, "take the screen over first: input goes through only while a person holds it")
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ex, err := s.m.Executor(r.Context(), acc.tenant, id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	resp, err := computer(r.Context(), ex, req)
	s.viewSlots.poke(id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	viewJSON(w, map[string]any{"cursor": map[string]int32{"x": resp.GetCursor().GetX(), "y": resp.GetCursor().GetY()}})
}

// computer makes one Computer call on ex, reading at most MaxFrameBytes
// of answer (a bigger one is an error, never read whole).
func computer(ctx context.Context, ex Executor, req *executorv1.ComputerRequest) (*executorv1.ComputerResponse, error) {
	c := executorv1connect.NewExecutorClient(&http.Client{Transport: ex.Transport(executorv1connect.ExecutorComputerProcedure)},
		executorURL.String(), connect.WithReadMaxBytes(MaxFrameBytes+64<<10),
		// PNGs are compressed already: no gzip of them in the sandbox.
		connect.WithAcceptCompression("gzip", nil, nil))
	creq := connect.NewRequest(req)
	creq.Header().Set("Authorization", "Bearer "+ex.Token())
	resp, err := c.Computer(ctx, creq)
	if err != nil {
		var ce *connect.Error
		if errors.As(err, &ce) && ce.Code() == connect.CodeResourceExhausted {
			return nil, errdefs.WithMessage(errdefs.ErrTooLarge, fmt.Sprintf("the sandbox's screenshot is over %d MiB, the most the view relays: use a smaller screen", MaxFrameBytes>>20))
		}
		return nil, errdefs.FromConnect(err)
	}
	return resp.Msg, nil
}

// checkFrame checks a screenshot's bytes before they are relayed: a PNG
// of at most MaxFrameBytes whose header's size is a screen's. It is never
// decoded here; the viewer's browser decodes it.
func checkFrame(png []byte) error {
	if len(png) > MaxFrameBytes {
		return errdefs.WithMessage(errdefs.ErrTooLarge, fmt.Sprintf("the sandbox's screenshot is over %d MiB, the most the view relays", MaxFrameBytes>>20))
	}
	if _, _, err := tool.PNGSize(png); err != nil {
		return errdefs.WithMessage(errdefs.ErrInternal, "the sandbox's screenshot is not a PNG of a screen's size: "+errdefs.Public(err))
	}
	return nil
}

// viewSlots counts the streams open per sandbox, and wakes them when
// input arrives (poke), so that its effect is shown without waiting out
// the interval.
type viewSlots struct {
	mu       sync.Mutex
	n        map[string]int
	byTenant map[string]int // by the sandboxes' owner
	pokes    map[string]chan struct{}
}

// poked is a channel closed at the next input on sandbox id.
func (v *viewSlots) poked(id string) <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.pokes == nil {
		v.pokes = map[string]chan struct{}{}
	}
	c := v.pokes[id]
	if c == nil {
		c = make(chan struct{})
		v.pokes[id] = c
	}
	return c
}

func (v *viewSlots) poke(id string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if c := v.pokes[id]; c != nil {
		close(c)
		delete(v.pokes, id)
	}
}

// take opens a stream on sandbox id of tenant owner; why says which bound
// refused it.
func (v *viewSlots) take(id, owner string) (release func(), why string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.n == nil {
		v.n, v.byTenant = map[string]int{}, map[string]int{}
	}
	if v.n[id] >= ViewersPerSandbox {
		return nil, fmt.Sprintf("sandbox %s has %d views open, the most it may: close one", id, ViewersPerSandbox)
	}
	if v.byTenant[owner] >= ViewersPerTenant {
		return nil, fmt.Sprintf("this tenant's sandboxes have %d views open, the most they may: close one", ViewersPerTenant)
	}
	v.n[id]++
	v.byTenant[owner]++
	return func() {
		v.mu.Lock()
		defer v.mu.Unlock()
		if v.byTenant[owner]--; v.byTenant[owner] == 0 {
			delete(v.byTenant, owner)
		}
		if v.n[id]--; v.n[id] == 0 {
			delete(v.n, id)
			delete(v.pokes, id)
		}
	}, ""
}

const frameBoundary = "reinsframe"

// viewFrames streams the screen: a screenshot at most every
// ViewFrameInterval, sent only when it changed (by its hash), each frame
// written within viewWriteTimeout or the stream ends. One frame is held
// at a time; nothing queues for a slow viewer.
func (s *Server) viewFrames(w http.ResponseWriter, r *http.Request, id string, acc viewAccess) {
	ctx := r.Context()
	// The bound per tenant counts the sandbox's owner's streams, whoever
	// watches (the owner, the admin, a link).
	rec, err := s.m.Get(ctx, acc.tenant, id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	release, why := s.viewSlots.take(id, rec.Tenant)
	if release == nil {
		s.writeError(w, r, errdefs.WithMessage(errdefs.ErrResourceExhausted, why))
		return
	}
	defer release()
	rc := http.NewResponseController(w)
	interval := cmpDur(s.viewInterval, ViewFrameInterval)
	var last [sha256.Size]byte
	started := false
	checked := time.Now()
	for {
		t0 := time.Now()
		// The credentials that opened the stream are checked again as it
		// runs: a link's stream ends when the link expires, a token's
		// when the token is revoked (or loses the sandbox).
		if t0.Sub(checked) >= viewRecheck {
			if _, err := s.viewCaller(r, id); err != nil {
				s.log.Debug("view stream ended", "sandbox", id, "err", errdefs.Public(err))
				return
			}
			checked = t0
		}
		png, err := s.frame(ctx, id, acc)
		if err != nil {
			if !started {
				s.writeError(w, r, err)
			} else if ctx.Err() == nil {
				s.log.Debug("view stream ended", "sandbox", id, "err", errdefs.Public(err))
			}
			return
		}
		if sum := sha256.Sum256(png); !started || sum != last {
			if !started {
				viewHeaders(w)
				w.Header().Set("Content-Type", "multipart/x-mixed-replace; boundary="+frameBoundary)
				io.WriteString(w, "--"+frameBoundary+"\r\n"+framePartHeader)
				started = true
			}
			last = sum
			rc.SetWriteDeadline(time.Now().Add(cmpDur(s.viewWriteTimeout, viewWriteTimeout)))
			if err := writeFrame(w, png); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			s.viewFramesSent.Add(1)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval - time.Since(t0)):
		case <-s.viewSlots.poked(id):
			// Input: look again soon, though not more than minFrameGap
			// after the last look (a flood of input is not a flood of
			// screenshots).
			time.Sleep(minFrameGap - time.Since(t0))
		}
	}
}

// viewRecheck is how often an open stream checks its viewer's
// credentials again.
const viewRecheck = time.Second

// minFrameGap is the shortest time between two screenshots of a stream
// woken by input.
const minFrameGap = 30 * time.Millisecond

func cmpDur(a, b time.Duration) time.Duration {
	if a > 0 {
		return a
	}
	return b
}

// framePartHeader begins a part. Each frame is written with the next
// part's header after it: Chromium shows a part of a multipart image only
// once the next part's header has come, so it is sent at once rather than
// with the next frame. (Parts end at the boundary; no Content-Length.)
const framePartHeader = "Content-Type: image/png\r\nX-Content-Type-Options: nosniff\r\n\r\n"

// writeFrame writes one frame, the boundary that ends it and the next
// part's header.
func writeFrame(w io.Writer, png []byte) error {
	_, err := w.Write(png)
	if err == nil {
		_, err = io.WriteString(w, "\r\n--"+frameBoundary+"\r\n"+framePartHeader)
	}
	return err
}

// frame takes one checked screenshot of sandbox id.
func (s *Server) frame(ctx context.Context, id string, acc viewAccess) ([]byte, error) {
	ex, err := s.m.Executor(ctx, acc.tenant, id)
	if err != nil {
		return nil, err
	}
	resp, err := computer(ctx, ex, &executorv1.ComputerRequest{Action: "screenshot"})
	if err != nil {
		return nil, err
	}
	if err := checkFrame(resp.Png); err != nil {
		return nil, err
	}
	return resp.Png, nil
}

// View links: like port links (portlink.go), signed with the same key,
// but over the view's own words, so that neither kind passes for the
// other; the link says whether it may take over.

func (p *Ports) viewMAC(id, kind, exp string) []byte {
	m := hmac.New(sha256.New, p.Key)
	fmt.Fprintf(m, "reins view link\x00%s\x00%s\x00%s", id, kind, exp)
	return m.Sum(nil)
}

func viewKind(takeover bool) string {
	if takeover {
		return "takeover"
	}
	return "watch"
}

// signView is a view link's value: KIND.EXPIRY.MAC.
func (p *Ports) signView(id string, takeover bool, expires time.Time) string {
	kind, exp := viewKind(takeover), strconv.FormatInt(expires.Unix(), 10)
	return kind + "." + exp + "." + base64.RawURLEncoding.EncodeToString(p.viewMAC(id, kind, exp))
}

// verifyView reports whether link is a good, unexpired view link to id,
// when it expires and whether it may take over.
func (p *Ports) verifyView(link, id string, now time.Time) (expires time.Time, takeover, ok bool) {
	kind, rest, _ := strings.Cut(link, ".")
	exp, sig, _ := strings.Cut(rest, ".")
	if kind != "watch" && kind != "takeover" {
		return time.Time{}, false, false
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, p.viewMAC(id, kind, exp)) {
		return time.Time{}, false, false
	}
	secs, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return time.Time{}, false, false
	}
	expires = time.Unix(secs, 0)
	return expires, kind == "takeover", now.Before(expires)
}

// viewBase is the service's own address as the URLs name it.
func (p *Ports) viewBase() string {
	h := p.Domain
	if p.ServicePort != "" {
		h = net.JoinHostPort(h, p.ServicePort)
	}
	return "http://" + h
}

// ViewURL returns a URL that shows a desktop sandbox's screen live.
func (s *Server) ViewURL(ctx context.Context, req *connect.Request[reinsv1.ViewURLRequest]) (*connect.Response[reinsv1.ViewURLResponse], error) {
	rec, err := s.m.Get(ctx, tenant(ctx), req.Msg.Id)
	if err != nil {
		return nil, err
	}
	if s.ports == nil {
		return nil, errdefs.WithMessage(errdefs.ErrUnimplemented, "this service serves no live views (it has no public address configured)")
	}
	if rec.State == sandbox.StateStopped {
		return nil, fmt.Errorf("%s: %w", notRunning(rec), errdefs.ErrFailedPrecondition)
	}
	if rec.Screen == "" {
		return nil, errdefs.WithMessage(errdefs.ErrFailedPrecondition, fmt.Sprintf(
			"sandbox %s has no display to view: create a desktop sandbox (reins sandbox create --image desktop)", rec.ID))
	}
	if req.Msg.Takeover && !req.Msg.Public {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "takeover is for public links (your token always may take over): add --public, or drop --takeover")
	}
	// A view link is checked as a port link is: the same ttl rules.
	expires, err := checkPortRequest(1, req.Msg.Public, time.Duration(req.Msg.TtlMs)*time.Millisecond, time.Now())
	if err != nil {
		return nil, err
	}
	resp := &reinsv1.ViewURLResponse{Url: s.ports.viewBase() + "/view/" + rec.ID}
	if !expires.IsZero() {
		resp.Url += "?" + viewLinkParam + "=" + s.ports.signView(rec.ID, req.Msg.Takeover, expires)
		resp.ExpiresUnixNano = expires.UnixNano()
	}
	return connect.NewResponse(resp), nil
}

// TakeOver holds a sandbox's screen for a person, or hands it back.
func (s *Server) TakeOver(ctx context.Context, req *connect.Request[reinsv1.TakeOverRequest]) (*connect.Response[reinsv1.TakeOverResponse], error) {
	if _, err := s.m.Get(ctx, tenant(ctx), req.Msg.Id); err != nil {
		return nil, err
	}
	if err := s.needHolds(); err != nil {
		return nil, err
	}
	if req.Msg.HandBack {
		if err := s.holds.HandBack(ctx, tenant(ctx), req.Msg.Id); err != nil {
			return nil, err
		}
		return connect.NewResponse(&reinsv1.TakeOverResponse{}), nil
	}
	by, err := holderName(req.Msg.By)
	if err != nil {
		return nil, err
	}
	h, err := s.holds.Hold(ctx, tenant(ctx), req.Msg.Id, by)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.TakeOverResponse{Held: true, HeldBy: h.By, SinceUnixNano: h.Since.UnixNano()}), nil
}

func (s *Server) withView(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.serveView(w, r) {
			next.ServeHTTP(w, r)
		}
	})
}

// open is how many streams sandbox id has open.
func (v *viewSlots) open(id string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.n[id]
}
