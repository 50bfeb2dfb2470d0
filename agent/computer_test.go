package agent_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image"
	"image/color"
	"image/png"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinsdev/reins/agent"
	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/model/script"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/store"
	"github.com/reinsdev/reins/tool/sandboxtool"
)

// screenSandboxes are hostSandboxes whose images may have a display
// (screens, by image), a screen that a person may hold (by sandbox id),
// and a drawn display: each computer call answers a PNG filled with a
// gray of its count, so that a test can tell screenshots apart.
type screenSandboxes struct {
	*hostSandboxes
	screens map[string]string

	mu    sync.Mutex
	calls []screenCall
	held  map[string]chan struct{}
	by    string
	built chan struct{} // closed when the slow image is ready
}

type screenCall struct {
	id  string
	req *executorv1.ComputerRequest
}

func (s *screenSandboxes) ImageScreen(ctx context.Context, tenant, image string) (string, error) {
	if image == "slow" {
		<-s.built
		return "1280x800", nil
	}
	if image == "missing" {
		return "", errdefs.WithMessage(errdefs.ErrNotFound, "image missing not found")
	}
	return s.screens[image], nil
}

func (s *screenSandboxes) Held(id string) (string, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch, ok := s.held[id]; ok {
		return s.by, ch
	}
	return "", nil
}

func (s *screenSandboxes) hold(id, by string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[id], s.by = make(chan struct{}), by
}

func (s *screenSandboxes) release(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.held[id])
	delete(s.held, id)
}

func (s *screenSandboxes) Executor(ctx context.Context, id string) (sandboxtool.Executor, error) {
	ex, err := s.hostSandboxes.Executor(ctx, id)
	if err != nil {
		return nil, err
	}
	return &drawnScreen{Executor: ex, s: s, id: id}, nil
}

type drawnScreen struct {
	sandboxtool.Executor
	s  *screenSandboxes
	id string
}

func (d *drawnScreen) Computer(ctx context.Context, req *executorv1.ComputerRequest) (*executorv1.ComputerResponse, error) {
	d.s.mu.Lock()
	d.s.calls = append(d.s.calls, screenCall{d.id, req})
	n := len(d.s.calls)
	d.s.mu.Unlock()
	w, h := int(req.ScaleWidth), int(req.ScaleHeight)
	img := image.NewGray(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = uint8(n * 10)
	}
	var buf bytes.Buffer
	png.Encode(&buf, img)
	return &executorv1.ComputerResponse{Png: buf.Bytes(), Width: uint32(w), Height: uint32(h), ScreenWidth: 1920, ScreenHeight: 1080,
		Cursor: &executorv1.Point{X: 5, Y: 6}, Note: "the screenshot was scaled from 1920x1080 to 1280x720"}, nil
}

// recorder is a script model that keeps the requests it was sent.
type recorder struct {
	m    model.Model
	mu   sync.Mutex
	reqs []*model.Request
}

func (r *recorder) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return r.m.Generate(ctx, req)
}

func (r *recorder) last() *model.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reqs[len(r.reqs)-1]
}

type screenEnv struct {
	*env
	sbs *screenSandboxes
	rec *recorder
	eng *agent.Engine
}

func newScreenEnv(t *testing.T) *screenEnv {
	e := newEnv(t)
	s := &screenEnv{env: e, sbs: &screenSandboxes{hostSandboxes: e.sbs, screens: map[string]string{"desktop": "1920x1080"},
		held: map[string]chan struct{}{}, built: make(chan struct{})}}
	eng, err := agent.New(agent.Config{Store: e.st, Blobs: e.blobs, Sandboxes: s.sbs,
		Models: func(spec agent.ModelSpec) (model.Model, string, error) {
			m, err := script.Load(strings.TrimPrefix(spec.Model, "script:"))
			if err != nil {
				return nil, "", err
			}
			if s.rec == nil {
				s.rec = &recorder{m: m}
			}
			s.rec.m = m
			return s.rec, "x", nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	s.eng = eng
	return s
}

func shot() map[string]any { return call("computer", map[string]any{"action": "screenshot"}) }

// TestComputerRun: a run whose sandbox has a display is offered the
// computer tool (the screen scaled as the model sees it, no sandbox
// argument), its calls go to that sandbox, its screenshots are stored as
// PNG artifacts and the model is shown only the newest three, older ones
// as a line it reads.
func TestComputerRun(t *testing.T) {
	e := newScreenEnv(t)
	m := e.script(turn("", call("bash", map[string]any{"command": "echo hi", "sandbox": "code"})),
		turn("", shot()), turn("", call("computer", map[string]any{"action": "left_click", "coordinate": []int{10, 20}})),
		turn("", shot()), turn("", shot()), turn("", shot()), turn("done"))
	id, err := e.eng.Start(context.Background(), "", runlog.Spec{Task: "look", Model: m,
		Sandboxes: map[string]string{"web": "desktop", "code": "debian"},
		Screens:   map[string]string{"code": "4096x4096"}}) // a caller's say is not taken
	if err != nil {
		t.Fatal(err)
	}
	row, evs := e.finish(e.eng, id)
	if row.Status != string(runlog.StatusSucceeded) {
		t.Fatalf("run %s: %s", row.Status, summary(t, row).Reason)
	}
	var created runlog.RunCreated
	json.Unmarshal(evs[0].Data, &created)
	if got := created.Spec.Screens; len(got) != 1 || got["web"] != "1920x1080" {
		t.Errorf("spec screens %v, want web: 1920x1080", got)
	}
	// Every computer call went to the web sandbox, scaled to 1280x720,
	// with a screenshot after it.
	webID := ""
	for _, ev := range evs {
		var sb runlog.SandboxEvent
		if ev.Type == runlog.EventSandboxCreated && json.Unmarshal(ev.Data, &sb) == nil && sb.Name == "web" {
			webID = sb.ID
		}
	}
	if len(e.sbs.calls) != 5 {
		t.Fatalf("%d computer calls reached an executor, want 5", len(e.sbs.calls))
	}
	for _, c := range e.sbs.calls {
		if c.id != webID || c.req.ScaleWidth != 1280 || c.req.ScaleHeight != 720 || !c.req.Screenshot {
			t.Errorf("computer call to %s (web is %s): %v", c.id, webID, c.req)
		}
	}
	if c := e.sbs.calls[1].req; c.Action != "left_click" || c.Coordinate.GetX() != 10 || c.Coordinate.GetY() != 20 {
		t.Errorf("the click reached the executor as %v", c)
	}
	// The tool as the model saw it.
	req := e.rec.last()
	var comp *model.ToolSpec
	for i, ts := range req.Tools {
		if ts.Name == "computer" {
			comp = &req.Tools[i]
		} else if ts.Name == "bash" && !strings.Contains(string(ts.InputSchema), `"sandbox"`) {
			t.Errorf("bash has no sandbox argument with two sandboxes")
		}
	}
	if comp == nil || comp.Computer == nil || *comp.Computer != (model.ComputerDisplay{Width: 1280, Height: 720}) ||
		strings.Contains(string(comp.InputSchema), `"sandbox"`) || !strings.Contains(comp.Description, "1280x720") {
		t.Fatalf("computer tool spec: %+v", comp)
	}
	if !strings.Contains(req.System, `Sandbox "web" has a display (1280x720 as you see it)`) || !strings.Contains(req.System, "browser URL") ||
		strings.Contains(req.System, "no network access") {
		t.Errorf("the system prompt does not tell of the display: %s", req.System)
	}
	// The last request shows screenshots 3, 4, 5 (grays 30, 40, 50) and
	// lines for 1 and 2.
	var grays []uint8
	var lines []string
	for _, msg := range req.Messages {
		for _, b := range msg.Content {
			for _, c := range b.Content {
				switch {
				case c.Type == model.BlockImage:
					if c.Digest != "" {
						t.Errorf("an image by reference reached the model")
					}
					data, _ := base64.StdEncoding.DecodeString(c.Data)
					img, err := png.Decode(bytes.NewReader(data))
					if err != nil {
						t.Fatalf("an image the model got does not decode: %v", err)
					}
					grays = append(grays, color.GrayModel.Convert(img.At(3, 3)).(color.Gray).Y)
				case c.Type == model.BlockText:
					lines = append(lines, c.Text)
				}
			}
		}
	}
	if !slices.Equal(grays, []uint8{30, 40, 50}) {
		t.Errorf("the model saw screenshots of grays %v, want the newest three: [30 40 50]", grays)
	}
	if len(lines) != 2 || !strings.Contains(lines[0], "[the screenshot of step 2 omitted: only the last 3 are kept; take a new one if you need it]") ||
		!strings.Contains(lines[1], "step 3 omitted") {
		t.Errorf("the omitted screenshots read %q", lines)
	}
	// The click's result says what it did, with the executor's note; its
	// intent names the sandbox, as other sandbox tools' do with several
	// (the policy's rules match it).
	for _, ev := range evs {
		var c runlog.ToolCall
		if ev.Type == runlog.EventToolCall && json.Unmarshal(ev.Data, &c) == nil && c.Name == "computer" {
			var in struct{ Sandbox, Action string }
			json.Unmarshal(c.Input, &in)
			if in.Sandbox != "web" || in.Action == "" {
				t.Errorf("computer intent %s: %s", c.CallID, c.Input)
			}
		}
		var res runlog.ToolResult
		if ev.Type == runlog.EventToolResult && json.Unmarshal(ev.Data, &res) == nil && res.Step == 3 {
			if !strings.Contains(res.Text, "left click at (10, 20)") || !strings.Contains(res.Text, "scaled from 1920x1080") || len(res.Images) != 1 {
				t.Errorf("the click's result: %+v", res)
			}
		}
	}
	// The screenshots are real PNG artifacts.
	arts, err := e.eng.Artifacts(context.Background(), "", id)
	if err != nil {
		t.Fatal(err)
	}
	var pngs int
	for _, a := range arts {
		if strings.HasSuffix(a.Name, ".png") {
			rc, _, err := e.eng.OpenArtifact(context.Background(), "", id, a.Name)
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(rc)
			rc.Close()
			if a.Size != int64(len(data)) {
				t.Errorf("artifact %s is listed at %d bytes, holds %d", a.Name, a.Size, len(data))
			}
			if cfg, err := png.DecodeConfig(bytes.NewReader(data)); err != nil || cfg.Width != 1280 || cfg.Height != 720 {
				t.Errorf("artifact %s: %v %+v", a.Name, err, cfg)
			}
			pngs++
		}
	}
	if pngs != 5 {
		t.Errorf("%d PNG artifacts, want 5", pngs)
	}
}

// TestComputerOffered: the tool is offered only to a run with a display,
// and a run with two displays is refused in words.
func TestComputerOffered(t *testing.T) {
	e := newScreenEnv(t)
	m := e.script(turn("", shot()), turn("done"))
	id, err := e.eng.Start(context.Background(), "", runlog.Spec{Task: "look", Model: m, Sandboxes: map[string]string{"default": "debian"}})
	if err != nil {
		t.Fatal(err)
	}
	_, evs := e.finish(e.eng, id)
	for _, ts := range e.rec.last().Tools {
		if ts.Name == "computer" {
			t.Errorf("a run without a display is offered computer")
		}
	}
	var res runlog.ToolResult
	for _, ev := range evs {
		if ev.Type == runlog.EventToolResult {
			json.Unmarshal(ev.Data, &res)
		}
	}
	if !res.IsError || !strings.Contains(res.Text, `unknown tool "computer"`) || len(e.sbs.calls) != 0 {
		t.Errorf("a computer call without a display: %+v (%d calls)", res, len(e.sbs.calls))
	}

	_, err = e.eng.Start(context.Background(), "", runlog.Spec{Task: "look", Model: m,
		Sandboxes: map[string]string{"a": "desktop", "b": "desktop"}})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "sandboxes a and b all have a display, and a run drives one screen") {
		t.Errorf("two displays: %v", err)
	}
	// An image that does not resolve has no display for the run, which
	// starts (and fails making its sandbox, as before displays).
	id, err = e.eng.Start(context.Background(), "", runlog.Spec{Task: "look", Model: m, Sandboxes: map[string]string{"a": "missing"}})
	if err != nil {
		t.Fatalf("a missing image: %v", err)
	}
	_, evs = e.finish(e.eng, id)
	var created runlog.RunCreated
	json.Unmarshal(evs[0].Data, &created)
	if len(created.Spec.Screens) != 0 {
		t.Errorf("a missing image has screens %v", created.Spec.Screens)
	}
}

// waitEvent waits for run id's log to have an event of type typ.
func waitEvent(t *testing.T, st store.Store, id, typ string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		evs, _ := st.Events(context.Background(), id, 0, 10000)
		if slices.Contains(types(evs), typ) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %s event", typ)
}

// startHeld starts a run of two screenshots on a screen that by holds
// from the run's second call on (its first makes the sandbox, sb1), and
// returns once the run waits on it.
func (e *screenEnv) startHeld(t *testing.T, by string) string {
	t.Helper()
	e.sbs.hold("sb1", by)
	m := e.script(turn("", shot()), turn("", shot()), turn("done"))
	id, err := e.eng.Start(context.Background(), "", runlog.Spec{Task: "look", Model: m, Sandboxes: map[string]string{"default": "desktop"}})
	if err != nil {
		t.Fatal(err)
	}
	waitEvent(t, e.st, id, runlog.EventTakeover)
	return id
}

// TestComputerTakeover: while a person holds the screen, the run's next
// computer call waits (a takeover event) and goes on after the hand-back
// (a handback event), in that order.
func TestComputerTakeover(t *testing.T) {
	e := newScreenEnv(t)
	id := e.startHeld(t, "alice")
	time.Sleep(200 * time.Millisecond)
	e.sbs.mu.Lock()
	n := len(e.sbs.calls)
	e.sbs.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d computer calls while the screen was held, want only the first", n)
	}
	e.sbs.release("sb1")
	row, evs := e.finish(e.eng, id)
	if row.Status != string(runlog.StatusSucceeded) {
		t.Fatalf("run %s: %s", row.Status, summary(t, row).Reason)
	}
	var got []string
	for _, ev := range evs {
		switch ev.Type {
		case runlog.EventTakeover, runlog.EventHandback, runlog.EventToolCall:
			got = append(got, ev.Type)
		}
		if ev.Type == runlog.EventTakeover {
			var d runlog.SandboxEvent
			json.Unmarshal(ev.Data, &d)
			if d.By != "alice" || d.Name != "default" || d.ID != "sb1" {
				t.Errorf("takeover event %+v", d)
			}
		}
	}
	if want := []string{"tool_call", "takeover", "handback", "tool_call"}; !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
}

// TestComputerTakeoverCancel: cancelling a run that waits on a held
// screen ends it cleanly, without the call.
func TestComputerTakeoverCancel(t *testing.T) {
	e := newScreenEnv(t)
	id := e.startHeld(t, "bob")
	if err := e.eng.Cancel(context.Background(), "", id); err != nil {
		t.Fatal(err)
	}
	row, evs := e.finish(e.eng, id)
	if row.Status != string(runlog.StatusCancelled) {
		t.Fatalf("run %s, want cancelled", row.Status)
	}
	ts := types(evs)
	if slices.Contains(ts, runlog.EventHandback) || strings.Count(strings.Join(ts, " "), "tool_call") != 1 || len(e.sbs.calls) != 1 {
		t.Errorf("events %v after a cancel while held (%d calls)", ts, len(e.sbs.calls))
	}
}

// TestComputerTakeoverPause: pausing a run that waits on a held screen
// parks it; resumed after the hand-back, it makes the call.
func TestComputerTakeoverPause(t *testing.T) {
	e := newScreenEnv(t)
	id := e.startHeld(t, "carol")
	if err := e.eng.Pause(context.Background(), "", id); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, e.st, id, runlog.EventPaused)
	e.sbs.release("sb1")
	if err := e.eng.Resume(context.Background(), "", id); err != nil {
		t.Fatal(err)
	}
	row, evs := e.finish(e.eng, id)
	if row.Status != string(runlog.StatusSucceeded) || len(e.sbs.calls) != 2 {
		t.Fatalf("run %s with %d computer calls; events %v", row.Status, len(e.sbs.calls), types(evs))
	}
}

// TestComputerSlowImage: an image whose first use outlasts a Start call
// (a build) fails Start in words, as unavailable; the resolve goes on, and
// once it is done the run starts with its screen.
func TestComputerSlowImage(t *testing.T) {
	defer agent.SetStartWait(100 * time.Millisecond)()
	e := newScreenEnv(t)
	m := e.script(turn("done"))
	spec := runlog.Spec{Task: "look", Model: m, Sandboxes: map[string]string{"default": "slow"}}
	_, err := e.eng.Start(context.Background(), "", spec)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "image slow is still being made ready") {
		t.Fatalf("a slow image: %v", err)
	}
	close(e.sbs.built)
	id, err := e.eng.Start(context.Background(), "", spec)
	if err != nil {
		t.Fatal(err)
	}
	_, evs := e.finish(e.eng, id)
	var created runlog.RunCreated
	json.Unmarshal(evs[0].Data, &created)
	if created.Spec.Screens["default"] != "1280x800" {
		t.Errorf("screens %v", created.Spec.Screens)
	}
}
