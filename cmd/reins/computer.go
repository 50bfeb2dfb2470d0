package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/tool"
)

// computerFlags are the flags of reins sandbox computer; each action
// takes only those that mean something for it.
type computerFlags struct {
	out            string
	scale          string
	button         string
	double, triple bool
	hold           time.Duration
	screenshot     bool
	json           bool
}

// Limits checked here, before a call: what the executor would refuse.
const (
	maxHold   = 100 * time.Second // the executor's bound on hold_key
	maxScroll = 100               // wheel clicks of one scroll
)

func computerCmd() *cobra.Command {
	var f computerFlags
	c := &cobra.Command{
		Use:   "computer ID ACTION [ARG...]",
		Short: "Drive a desktop sandbox's screen, mouse and keyboard",
		Long: `Drive the display of a desktop sandbox (reins sandbox create --image desktop):
take screenshots, move and click the mouse, type and press keys. Coordinates
are pixels from the top left of the screen (or of --scale's space).

  screenshot [-o FILE]                  a PNG (default: screenshot-ID-TIME.png here; -o - writes it to stdout)
  click X Y [--button B] [--double|--triple]
  move X Y
  drag X1 Y1 X2 Y2                      press the left button at X1 Y1, release it at X2 Y2
  down|up [--button B]                  press or release a button where the pointer is
  type TEXT                             type the text (quote it), as a keyboard would
  key COMBO [--hold DUR]                press a key combo in xdotool's names: ctrl+l, Return, shift+Tab
  scroll X Y up|down|left|right N       N wheel clicks at X Y
  cursor                                print where the pointer is
  zoom X1 Y1 X2 Y2 [-o FILE]            a screenshot of that region, enlarged to fit the screen (or --scale)

Each action prints where the pointer is after it; --screenshot adds a
screenshot taken after the action. --json prints the executor's answer
(its png in base64, unless -o wrote it to a file).

  reins sandbox computer 3f2a9c1b7d4e click 640 400 --screenshot
  reins sandbox computer 3f2a9c1b7d4e key ctrl+l
  reins sandbox computer 3f2a9c1b7d4e type 'https://example.com'
  reins sandbox computer 3f2a9c1b7d4e screenshot --scale 640x400 -o small.png`,
		Args: usageArgs(cobra.MinimumNArgs(2)),
		RunE: func(c *cobra.Command, args []string) error {
			req, err := computerRequest(args[1], args[2:], f)
			if err != nil {
				return usageError{err}
			}
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			stop := showWaiting(req)
			resp, err := cl.Sandbox(args[0]).Computer(ctx, req)
			stop()
			if err != nil {
				return err
			}
			return printComputer(ctx, c.OutOrStdout(), c.ErrOrStderr(), args[0], req, resp, f)
		},
	}
	fl := c.Flags()
	fl.StringVarP(&f.out, "output", "o", "", "write the screenshot to this file (- for stdout)")
	fl.StringVar(&f.scale, "scale", "", "work in a WxH coordinate space: coordinates are scaled to the screen, screenshots to WxH")
	fl.StringVar(&f.button, "button", "", "click, down, up: left (default), right or middle")
	fl.BoolVar(&f.double, "double", false, "click: a double click (left button)")
	fl.BoolVar(&f.triple, "triple", false, "click: a triple click (left button)")
	durationVar(fl, &f.hold, "hold", 0, "key: hold the combo down this long, e.g. 2s (at most 100s)")
	fl.BoolVar(&f.screenshot, "screenshot", false, "take a screenshot after the action")
	fl.BoolVar(&f.json, "json", false, "print the answer as JSON")
	return c
}

// showWaiting shows, on a terminal, a call that takes over a second
// (a hold, a long text typed, the X server's first start), until stop.
func showWaiting(req *executorv1.ComputerRequest) (stop func()) {
	bar := newStatusLine(os.Stderr)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if el := time.Since(bar.start); el >= time.Second {
					bar.show(fmt.Sprintf("%s: %.1fs (Ctrl-C stops waiting)", req.Action, el.Seconds()), false)
				}
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		bar.Done()
	}
}

// computerActions are the CLI's action names and how many arguments each
// takes.
var computerActions = map[string]int{
	"screenshot": 0, "click": 2, "move": 2, "drag": 4, "down": 0, "up": 0,
	"type": 1, "key": 1, "scroll": 4, "cursor": 0, "zoom": 4,
}

const computerUsage = "screenshot, click X Y, move X Y, drag X1 Y1 X2 Y2, down, up, type TEXT, key COMBO, scroll X Y DIRECTION N, cursor or zoom X1 Y1 X2 Y2"

// computerRequest turns the CLI's action, its arguments and flags into the
// executor's request, checking what can be checked here.
func computerRequest(action string, args []string, f computerFlags) (*executorv1.ComputerRequest, error) {
	n, ok := computerActions[action]
	switch {
	case !ok:
		return nil, fmt.Errorf("unknown action %.40q: use %s", action, computerUsage)
	case len(args) != n:
		return nil, fmt.Errorf("%s takes %d argument%s, not %d: use %s", action, n, plural(n), len(args), computerUsage)
	}
	if err := checkComputerFlags(action, f); err != nil {
		return nil, err
	}
	req := &executorv1.ComputerRequest{Screenshot: f.screenshot}
	if f.scale != "" {
		w, h, err := parseSize(f.scale)
		if err != nil {
			return nil, fmt.Errorf("--scale: %w", err)
		}
		req.ScaleWidth, req.ScaleHeight = uint32(w), uint32(h)
	}
	nums, err := coordinates(action, args)
	if err != nil {
		return nil, err
	}
	switch action {
	case "screenshot", "cursor":
		req.Action = map[string]string{"screenshot": "screenshot", "cursor": "cursor_position"}[action]
	case "click":
		req.Action = f.button + "_click"
		switch {
		case f.double:
			req.Action = "double_click"
		case f.triple:
			req.Action = "triple_click"
		case f.button == "":
			req.Action = "left_click"
		}
		req.Coordinate = &executorv1.Point{X: nums[0], Y: nums[1]}
	case "move":
		req.Action, req.Coordinate = "mouse_move", &executorv1.Point{X: nums[0], Y: nums[1]}
	case "drag":
		req.Action = "left_click_drag"
		req.StartCoordinate = &executorv1.Point{X: nums[0], Y: nums[1]}
		req.Coordinate = &executorv1.Point{X: nums[2], Y: nums[3]}
	case "down", "up":
		req.Action, req.Button = "left_mouse_"+action, f.button
	case "type":
		if args[0] == "" {
			return nil, errors.New("type: the text is empty")
		}
		req.Action, req.Text = "type", args[0]
	case "key":
		if strings.TrimSpace(args[0]) == "" {
			return nil, errors.New("key: the combo is empty: name a key like Return, or a combo like ctrl+l")
		}
		req.Action, req.Text = "key", args[0]
		if f.hold > 0 {
			req.Action, req.DurationMs = "hold_key", uint32(f.hold.Milliseconds())
		}
	case "scroll":
		req.Action, req.Coordinate = "scroll", &executorv1.Point{X: nums[0], Y: nums[1]}
		switch args[2] {
		case "up", "down", "left", "right":
			req.ScrollDirection = args[2]
		default:
			return nil, fmt.Errorf("scroll: direction %.20q: use up, down, left or right", args[2])
		}
		amount, err := strconv.ParseUint(args[3], 10, 32)
		if err != nil || amount < 1 || amount > maxScroll {
			return nil, fmt.Errorf("scroll: %.20q wheel clicks: give a whole number from 1 to %d", args[3], maxScroll)
		}
		req.ScrollAmount = uint32(amount)
	case "zoom":
		if nums[0] >= nums[2] || nums[1] >= nums[3] {
			return nil, fmt.Errorf("zoom: the region %d %d %d %d is empty: give its top left corner (X1 Y1), then its bottom right (X2 Y2)", nums[0], nums[1], nums[2], nums[3])
		}
		req.Action, req.Region = "zoom", nums
	}
	return req, nil
}

// checkComputerFlags refuses a flag that means nothing for action.
func checkComputerFlags(action string, f computerFlags) error {
	shot := action == "screenshot" || action == "zoom"
	switch {
	case f.button != "" && action != "click" && action != "down" && action != "up":
		return fmt.Errorf("--button is for click, down and up, not %s", action)
	case f.button != "" && f.button != "left" && f.button != "right" && f.button != "middle":
		return fmt.Errorf("--button %.20q: use left, right or middle", f.button)
	case (f.double || f.triple) && action != "click":
		return fmt.Errorf("--double and --triple are for click, not %s", action)
	case f.double && f.triple:
		return errors.New("--double or --triple, not both")
	case (f.double || f.triple) && f.button != "" && f.button != "left":
		return errors.New("--double and --triple click the left button: drop --button")
	case f.hold != 0 && action != "key":
		return fmt.Errorf("--hold is for key, not %s", action)
	case f.hold < 0 || f.hold > maxHold:
		return fmt.Errorf("--hold %s: give a duration up to %s", f.hold, maxHold)
	case f.out != "" && !shot && !f.screenshot:
		return fmt.Errorf("-o is for the screenshot of screenshot, zoom or --screenshot; %s takes none without --screenshot", action)
	case f.json && f.out == "-":
		return errors.New("--json and -o - both write to stdout: give -o a file, or drop one")
	}
	return nil
}

// coordinates parses the numeric arguments of action (all but scroll's
// direction and amount): pixels, 0 or more.
func coordinates(action string, args []string) ([]int32, error) {
	switch action {
	case "click", "move", "drag", "zoom":
	case "scroll":
		args = args[:2]
	default:
		return nil, nil
	}
	out := make([]int32, len(args))
	for i, a := range args {
		v, err := strconv.ParseInt(a, 10, 32)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%s: %.20q is not a position: coordinates are whole numbers of pixels from the top left, 0 or more", action, a)
		}
		out[i] = int32(v)
	}
	return out, nil
}

// parseSize reads --scale's WxH: each side 1 to sandbox.MaxScreenSide.
func parseSize(s string) (w, h int, err error) {
	ws, hs, ok := strings.Cut(strings.ToLower(s), "x")
	w, werr := strconv.Atoi(ws)
	h, herr := strconv.Atoi(hs)
	if !ok || werr != nil || herr != nil || w < 1 || h < 1 || w > sandbox.MaxScreenSide || h > sandbox.MaxScreenSide {
		return 0, 0, fmt.Errorf("%.40q is not WIDTHxHEIGHT: give each side in pixels, 1 to %d, like 1280x800", s, sandbox.MaxScreenSide)
	}
	return w, h, nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// printComputer shows an answer: the screenshot written (to -o, or a new
// file here), the pointer, and the executor's note.
func printComputer(ctx context.Context, stdout, stderr io.Writer, id string, req *executorv1.ComputerRequest, resp *executorv1.ComputerResponse, f computerFlags) error {
	if err := checkShot(resp); err != nil {
		return err
	}
	if resp.Note != "" {
		fmt.Fprintln(stderr, "note:", resp.Note)
	}
	if f.json {
		if len(resp.Png) > 0 && f.out != "" {
			if err := writeShot(ctx, f.out, resp.Png); err != nil {
				return err
			}
			resp.Png = nil
		}
		return printJSON(stdout, resp)
	}
	if len(resp.Png) > 0 {
		if f.out == "-" {
			_, err := stdout.Write(resp.Png)
			return err
		}
		name := f.out
		if name == "" {
			kind := "screenshot"
			if req.Action == "zoom" {
				kind = "zoom"
			}
			name = fmt.Sprintf("%s-%s-%s.png", kind, safeName(id), time.Now().UTC().Format("20060102-150405.000"))
		}
		if err := writeShot(ctx, name, resp.Png); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s %dx%d (%s)\n", name, resp.Width, resp.Height, humanBytes(int64(len(resp.Png))))
	}
	if req.Action != "screenshot" && req.Action != "zoom" && resp.Cursor != nil {
		fmt.Fprintf(stdout, "cursor %d,%d\n", resp.Cursor.X, resp.Cursor.Y)
	}
	return nil
}

// checkShot checks the screenshot of an answer, the sandbox's bytes,
// before anything is written: a PNG whose header says the size the
// answer does, within a screen's bounds. Only the header is decoded.
func checkShot(resp *executorv1.ComputerResponse) error {
	if len(resp.Png) == 0 {
		return nil
	}
	w, h, err := tool.PNGSize(resp.Png)
	switch {
	case err != nil:
		return fmt.Errorf("the sandbox's screenshot is refused (%s): nothing was written: %w", errdefs.Public(err), errdefs.ErrInternal)
	case w != int(resp.Width) || h != int(resp.Height):
		return fmt.Errorf("the sandbox's screenshot is %dx%d, but its answer says %dx%d: nothing was written: %w",
			w, h, resp.Width, resp.Height, errdefs.ErrInternal)
	}
	return nil
}

// writeShot writes png to name through a temporary file beside it, so
// that a Ctrl-C or a full disk leaves no half a PNG under the name.
func writeShot(ctx context.Context, name string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return fmt.Errorf("writing the screenshot: %w", err)
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = ctx.Err()
	}
	if err == nil {
		err = os.Rename(tmp.Name(), name)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing the screenshot to %s: %w", name, err)
	}
	return nil
}

// safeName keeps a sandbox id fit for a file name (ids are hex; a typo
// is not).
func safeName(id string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, id)
}
