package computer

import (
	"context"
	"fmt"
	"image"
	"strings"
	"time"

	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
)

// Bounds and defaults of actions.
const (
	MaxDuration            = 100 * time.Second // hold_key, wait
	DefaultWait            = time.Second
	MaxScreenshotDelay     = 10 * time.Second
	DefaultScrollAmount    = 3
	MaxScrollAmount        = 100
	MinScale               = 16
	dragSteps              = 8
	dragStepDelay          = 8 * time.Millisecond
	DefaultScreenshotDelay = 300 * time.Millisecond
)

// Actions are the actions Do takes (those of Anthropic's computer-use tool).
var Actions = []string{"screenshot", "left_click", "right_click", "middle_click", "double_click", "triple_click",
	"mouse_move", "left_click_drag", "left_mouse_down", "left_mouse_up", "type", "key", "hold_key", "scroll",
	"cursor_position", "wait", "zoom"}

// space maps the request's coordinates (w×h: the scale asked, or the
// screen's) to the screen's (sw×sh) and back; asked says a scale was.
type space struct {
	w, h, sw, sh int
	asked        bool
}

func (s space) toScreen(p *executorv1.Point, what string) (int, int, error) {
	x, y := int(p.GetX()), int(p.GetY())
	if x < 0 || y < 0 || x >= s.w || y >= s.h {
		return 0, 0, errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf(
			"%s (%d, %d) is off the screen, which is %dx%d: x must be 0..%d and y 0..%d", what, x, y, s.w, s.h, s.w-1, s.h-1))
	}
	// The centre of the request's pixel.
	return (2*x + 1) * s.sw / (2 * s.w), (2*y + 1) * s.sh / (2 * s.h), nil
}

func (s space) fromScreen(x, y int) *executorv1.Point {
	return &executorv1.Point{X: int32((2*x + 1) * s.w / (2 * s.sw)), Y: int32((2*y + 1) * s.h / (2 * s.sh))}
}

// requestSpace checks the scale asked for.
func requestSpace(req *executorv1.ComputerRequest, sw, sh int) (space, error) {
	w, h := int(req.GetScaleWidth()), int(req.GetScaleHeight())
	if w == 0 && h == 0 {
		return space{sw, sh, sw, sh, false}, nil
	}
	if w < MinScale || h < MinScale || w > MaxSide || h > MaxSide {
		return space{}, errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf(
			"scale %dx%d: give both scale_width and scale_height, each %d..%d (or neither, for the screen's %dx%d)",
			w, h, MinScale, MaxSide, sw, sh))
	}
	return space{w, h, sw, sh, true}, nil
}

// maxCall bounds one call: the longest action (MaxDuration) and time to
// type a long text and take a screenshot.
var maxCall = MaxDuration + 2*time.Minute

// Do takes one action and answers with the pointer's position and, when
// one was asked for (always for screenshot and zoom), a screenshot.
func (d *Display) Do(ctx context.Context, req *executorv1.ComputerRequest) (*executorv1.ComputerResponse, error) {
	sp, err := requestSpace(req, d.cfg.Width, d.cfg.Height)
	if err != nil {
		return nil, err
	}
	act, err := d.plan(req, sp)
	if err != nil {
		return nil, err
	}
	// Every call ends: one whose caller set no deadline is not waited on
	// for ever by a server that does not answer (a program grabbed it).
	ctx, cancel := context.WithTimeout(ctx, maxCall)
	defer cancel()
	d.mu.Lock()
	defer d.mu.Unlock()
	x, err := d.ensureLocked(ctx)
	if err != nil {
		return nil, err
	}
	defer x.cutOnDone(ctx)()
	resp := &executorv1.ComputerResponse{ScreenWidth: uint32(x.width), ScreenHeight: uint32(x.height)}
	if err := act.run(ctx, x); err != nil {
		return nil, err
	}
	var notes []string
	if act.shoot {
		if act.delay > 0 {
			d.sleep(ctx, act.delay)
		}
		s, err := d.screenshot(x, sp, act.region)
		if err != nil {
			return nil, err
		}
		resp.Png, resp.Width, resp.Height = s.png, uint32(s.width), uint32(s.height)
		if s.note != "" {
			notes = append(notes, s.note)
		}
	}
	ptr, err := xproto.QueryPointer(x.conn, x.root).Reply()
	if err != nil {
		return nil, fmt.Errorf("reading the pointer's position: %w", err)
	}
	resp.Cursor = sp.fromScreen(int(ptr.RootX), int(ptr.RootY))
	resp.Note = strings.Join(append(d.takeNotes(), notes...), "; ")
	return resp, nil
}

func (d *Display) takeNotes() []string {
	n := d.notes
	d.notes = nil
	return n
}

// action is a checked request, ready to run.
type action struct {
	run    func(ctx context.Context, x *xserver) error
	shoot  bool
	delay  time.Duration
	region image.Rectangle // zoom: in screen pixels
}

// plan checks req against the screen and returns what to do.
func (d *Display) plan(req *executorv1.ComputerRequest, sp space) (*action, error) {
	a := &action{shoot: req.GetScreenshot()}
	if ms := req.GetScreenshotDelayMs(); ms > 0 {
		a.delay = time.Duration(ms) * time.Millisecond
		if a.delay > MaxScreenshotDelay {
			return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument,
				fmt.Sprintf("screenshot_delay_ms %d is over the limit of %d", ms, MaxScreenshotDelay.Milliseconds()))
		}
	} else if a.shoot {
		a.delay = DefaultScreenshotDelay
	}
	point := func(p *executorv1.Point, what string, required bool) (func(x *xserver), error) {
		if p == nil {
			if required {
				return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf("%s needs a %s", req.GetAction(), what))
			}
			return func(*xserver) {}, nil
		}
		px, py, err := sp.toScreen(p, what)
		if err != nil {
			return nil, err
		}
		return func(x *xserver) { x.move(px, py) }, nil
	}
	var err error
	switch act := req.GetAction(); act {
	case "screenshot":
		a.shoot, a.delay = true, 0
		a.run = func(context.Context, *xserver) error { return nil }
	case "left_click", "right_click", "middle_click", "double_click", "triple_click":
		button, count := map[string]byte{"right_click": 3, "middle_click": 2}[act], map[string]int{"double_click": 2, "triple_click": 3}[act]
		button, count = max(button, 1), max(count, 1)
		var move func(*xserver)
		if move, err = point(req.GetCoordinate(), "coordinate", false); err != nil {
			return nil, err
		}
		a.run, err = d.holding(req.GetText(), func(ctx context.Context, x *xserver) error {
			move(x)
			for range count {
				x.button(button, true)
				x.button(button, false)
			}
			return x.sync()
		})
	case "mouse_move":
		move, err := point(req.GetCoordinate(), "coordinate", true)
		if err != nil {
			return nil, err
		}
		a.run = func(_ context.Context, x *xserver) error { move(x); return x.sync() }
	case "left_click_drag":
		a.run, err = d.planDrag(req, sp)
	case "left_mouse_down", "left_mouse_up":
		button, ok := map[string]byte{"": 1, "left": 1, "middle": 2, "right": 3}[req.GetButton()]
		if !ok {
			return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument,
				fmt.Sprintf("button %q: give left, middle or right", truncate(req.GetButton(), 20)))
		}
		move, err := point(req.GetCoordinate(), "coordinate", false)
		if err != nil {
			return nil, err
		}
		down := act == "left_mouse_down"
		a.run = func(_ context.Context, x *xserver) error { move(x); x.button(button, down); return x.sync() }
	case "type":
		a.run, err = d.planType(req.GetText())
	case "key", "hold_key":
		a.run, err = d.planKey(req, act == "hold_key")
	case "scroll":
		a.run, err = d.planScroll(req, sp)
	case "cursor_position":
		a.run = func(context.Context, *xserver) error { return nil }
	case "wait":
		dur := DefaultWait
		if ms := req.GetDurationMs(); ms > 0 {
			dur = time.Duration(ms) * time.Millisecond
		}
		if dur > MaxDuration {
			return nil, tooLong(dur)
		}
		a.delay = 0
		a.run = func(ctx context.Context, x *xserver) error { return d.sleep(ctx, dur) }
	case "zoom":
		a.shoot, a.delay = true, 0
		a.region, err = zoomRegion(req.GetRegion(), sp)
		a.run = func(context.Context, *xserver) error { return nil }
	default:
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument,
			fmt.Sprintf("unknown action %q: give one of %s", truncate(act, 40), strings.Join(Actions, ", ")))
	}
	if err != nil {
		return nil, err
	}
	return a, nil
}

func tooLong(d time.Duration) error {
	return errdefs.WithMessage(errdefs.ErrInvalidArgument,
		fmt.Sprintf("duration %v is over the limit of %v: wait in several calls", d, MaxDuration))
}

// holding returns fn run with the keys text names held down ("shift",
// "ctrl+alt"): the modifiers of a click or a scroll.
func (d *Display) holding(text string, fn func(ctx context.Context, x *xserver) error) (func(context.Context, *xserver) error, error) {
	if strings.TrimSpace(text) == "" {
		return fn, nil
	}
	combo, err := parseCombo(strings.TrimSpace(text))
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, x *xserver) error {
		km, err := x.readKeymap()
		if err != nil {
			return err
		}
		return d.withKeys(ctx, x, km, combo, func() error {
			release := pressCombo(x, km, combo)
			defer release()
			return fn(ctx, x)
		})
	}, nil
}

func (d *Display) planDrag(req *executorv1.ComputerRequest, sp space) (func(context.Context, *xserver) error, error) {
	if req.GetStartCoordinate() == nil || req.GetCoordinate() == nil {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "left_click_drag needs a start_coordinate and a coordinate (where it ends)")
	}
	x0, y0, err := sp.toScreen(req.GetStartCoordinate(), "start_coordinate")
	if err != nil {
		return nil, err
	}
	x1, y1, err := sp.toScreen(req.GetCoordinate(), "coordinate")
	if err != nil {
		return nil, err
	}
	return d.holding(req.GetText(), func(ctx context.Context, x *xserver) error {
		x.move(x0, y0)
		x.button(1, true)
		// In steps, a moment apart: a program sees a drag only when the
		// pointer moves with the button down.
		for i := 1; i <= dragSteps; i++ {
			if err := x.sync(); err != nil {
				return err
			}
			d.sleep(context.Background(), dragStepDelay)
			x.move(x0+(x1-x0)*i/dragSteps, y0+(y1-y0)*i/dragSteps)
		}
		x.button(1, false)
		return x.sync()
	})
}

func (d *Display) planType(text string) (func(context.Context, *xserver) error, error) {
	if text == "" {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "type needs the text to type")
	}
	if n := len([]rune(text)); n > MaxText {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument,
			fmt.Sprintf("text of %d characters is over the limit of %d a type action: type it in several", n, MaxText))
	}
	return func(ctx context.Context, x *xserver) error { return d.typeText(ctx, x, text) }, nil
}

func (d *Display) planKey(req *executorv1.ComputerRequest, hold bool) (func(context.Context, *xserver) error, error) {
	combos, err := parseKeys(req.GetText())
	if err != nil {
		return nil, err
	}
	dur := time.Duration(req.GetDurationMs()) * time.Millisecond
	if hold && dur <= 0 {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "hold_key needs duration_ms, how long to hold the keys")
	}
	if dur > MaxDuration {
		return nil, tooLong(dur)
	}
	return func(ctx context.Context, x *xserver) error {
		km, err := x.readKeymap()
		if err != nil {
			return err
		}
		var all []xproto.Keysym
		for _, c := range combos {
			all = append(all, c...)
		}
		return d.withKeys(ctx, x, km, all, func() error {
			for _, combo := range combos {
				release := pressCombo(x, km, combo)
				if hold {
					if err := x.sync(); err != nil {
						release()
						return err
					}
					d.sleep(ctx, dur)
				}
				release()
			}
			return x.sync()
		})
	}, nil
}

func (d *Display) planScroll(req *executorv1.ComputerRequest, sp space) (func(context.Context, *xserver) error, error) {
	button, ok := map[string]byte{"up": 4, "down": 5, "left": 6, "right": 7}[req.GetScrollDirection()]
	if !ok {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument,
			fmt.Sprintf("scroll_direction %q: give up, down, left or right", truncate(req.GetScrollDirection(), 20)))
	}
	amount := int(req.GetScrollAmount())
	if amount == 0 {
		amount = DefaultScrollAmount
	}
	if amount > MaxScrollAmount {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument,
			fmt.Sprintf("scroll_amount %d is over the limit of %d wheel clicks", amount, MaxScrollAmount))
	}
	var px, py int
	at := req.GetCoordinate() != nil
	if at {
		var err error
		if px, py, err = sp.toScreen(req.GetCoordinate(), "coordinate"); err != nil {
			return nil, err
		}
	}
	return d.holding(req.GetText(), func(ctx context.Context, x *xserver) error {
		if at {
			x.move(px, py)
		}
		for range amount {
			x.button(button, true)
			x.button(button, false)
		}
		return x.sync()
	})
}

// zoomRegion checks a zoom's region (x1, y1, x2, y2 in the request's
// space, the second corner exclusive) and returns it in screen pixels.
func zoomRegion(r []int32, sp space) (image.Rectangle, error) {
	if len(r) != 4 {
		return image.Rectangle{}, errdefs.WithMessage(errdefs.ErrInvalidArgument,
			fmt.Sprintf("zoom needs a region of 4 numbers, x1, y1, x2, y2 (got %d)", len(r)))
	}
	x1, y1, x2, y2 := int(r[0]), int(r[1]), int(r[2]), int(r[3])
	if x1 < 0 || y1 < 0 || x2 > sp.w || y2 > sp.h || x1 >= x2 || y1 >= y2 {
		return image.Rectangle{}, errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf(
			"zoom region (%d, %d)-(%d, %d) is empty or off the screen, which is %dx%d: give the top left corner, then the bottom right, with 0 <= x1 < x2 <= %d and 0 <= y1 < y2 <= %d",
			x1, y1, x2, y2, sp.w, sp.h, sp.w, sp.h))
	}
	rect := image.Rect(x1*sp.sw/sp.w, y1*sp.sh/sp.h, (x2*sp.sw+sp.w-1)/sp.w, (y2*sp.sh+sp.h-1)/sp.h)
	return rect.Intersect(image.Rect(0, 0, sp.sw, sp.sh)), nil
}

// screenshot captures the screen (or the zoom's region) and scales it to
// the request's space.
func (d *Display) screenshot(x *xserver, sp space, region image.Rectangle) (shot, error) {
	zoom := !region.Empty()
	if !zoom {
		region = image.Rect(0, 0, x.width, x.height)
	}
	img, err := x.capture(region)
	if err != nil {
		return shot{}, err
	}
	w, h := sp.w, sp.h
	if zoom {
		w, h = fitInside(region.Dx(), region.Dy(), sp.w, sp.h)
	}
	var note string
	if !sp.asked {
		if fw, fh := fitPixels(w, h); fw != w {
			note = fmt.Sprintf("the screenshot was scaled from %dx%d to %dx%d to fit the limit of %.2f megapixels; coordinates are still the screen's (%dx%d): ask with scale_width %d and scale_height %d to work in the screenshot's",
				w, h, fw, fh, float64(MaxPixels)/1e6, sp.sw, sp.sh, fw, fh)
			w, h = fw, fh
		}
	}
	s, err := encode(img, w, h)
	if err != nil {
		return shot{}, err
	}
	if s.note != "" {
		s.note += fmt.Sprintf("; coordinates are still in %dx%d", sp.w, sp.h)
	}
	if note != "" && s.note != "" {
		s.note = note + "; " + s.note
	} else if note != "" {
		s.note = note
	}
	return s, nil
}

func (x *xserver) move(px, py int) {
	xtest.FakeInput(x.conn, xproto.MotionNotify, 0, 0, x.root, int16(px), int16(py), 0)
}

func (x *xserver) button(b byte, down bool) {
	typ := byte(xproto.ButtonRelease)
	if down {
		typ = xproto.ButtonPress
	}
	xtest.FakeInput(x.conn, typ, b, 0, x.root, 0, 0, 0)
}

// sleep waits for dur, or less if ctx ends or the display closes; it
// reports why it stopped early.
func (d *Display) sleep(ctx context.Context, dur time.Duration) error {
	t := time.NewTimer(dur)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-d.closing:
		return errdefs.WithMessage(errdefs.ErrUnavailable, "the display is shut down: the executor is stopping")
	}
}
