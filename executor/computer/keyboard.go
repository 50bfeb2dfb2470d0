package computer

import (
	"context"
	"fmt"
	"time"

	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"

	"github.com/reinsdev/reins/errdefs"
)

// MaxText bounds the text of one type action, in characters. Typing is a
// key press and release a character, and a client takes its time with
// each: 16k characters is already minutes of work for some.
const MaxText = 16 << 10

// typeChunk is how many characters are typed between round trips to the
// X server, so that a slow client is not buried under a burst.
const typeChunk = 64

// A client reads the keyboard mapping when it handles the MappingNotify
// that says it changed, which comes before the key presses that follow in
// its queue; but it reads the mapping as it is then, on the server. So a
// remapped key is left a moment before it is pressed (remapSettle), and a
// longer one before it is put back or given another character
// (restoreSettle): a client running behind by less than that still reads
// the mapping the presses were made with. Each type action remaps once
// per round of as many different missing characters as there are spare
// keys (usually one round), not once per chunk.
var (
	remapSettle   = 30 * time.Millisecond
	restoreSettle = 150 * time.Millisecond
)

// keymap is the keyboard mapping as read from the server (read again for
// every action: a program in the sandbox may change it, and it costs one
// round trip).
type keymap struct {
	min   xproto.Keycode
	per   int
	syms  []xproto.Keysym
	where map[xproto.Keysym]keyPos
	spare []xproto.Keycode // keycodes with no keysym at all
	shift xproto.Keycode
}

// keyPos is where a keysym is: a keycode, pressed with or without Shift.
type keyPos struct {
	code  xproto.Keycode
	shift bool
}

func (x *xserver) readKeymap() (*keymap, error) {
	setup := xproto.Setup(x.conn)
	count := int(setup.MaxKeycode) - int(setup.MinKeycode) + 1
	reply, err := xproto.GetKeyboardMapping(x.conn, setup.MinKeycode, byte(count)).Reply()
	if err != nil {
		return nil, fmt.Errorf("reading the keyboard mapping: %w", err)
	}
	km := &keymap{min: setup.MinKeycode, per: int(reply.KeysymsPerKeycode), syms: reply.Keysyms, where: map[xproto.Keysym]keyPos{}}
	if km.per == 0 || len(km.syms) < count*km.per {
		return nil, fmt.Errorf("reading the keyboard mapping: %d keysyms for %d keys", len(km.syms), count)
	}
	// Unshifted positions first, so that "a" is typed without Shift
	// even where another key has it shifted.
	for level := range min(2, km.per) {
		for i := range count {
			ks := km.syms[i*km.per+level]
			if _, seen := km.where[ks]; ks != 0 && !seen {
				km.where[ks] = keyPos{code: km.min + xproto.Keycode(i), shift: level == 1}
			}
		}
	}
	for i := range count {
		empty := true
		for _, ks := range km.syms[i*km.per : (i+1)*km.per] {
			empty = empty && ks == 0
		}
		if empty {
			km.spare = append(km.spare, km.min+xproto.Keycode(i))
		}
	}
	pos, ok := km.where[ksShiftL]
	if !ok {
		return nil, fmt.Errorf("the keyboard mapping has no Shift key")
	}
	km.shift = pos.code
	return km, nil
}

// remap gives each keysym of need that the mapping lacks a spare keycode
// of its own (the same keysym at both levels, so Shift does not matter).
// It returns the keycodes it took, for restore.
func (x *xserver) remap(km *keymap, need []xproto.Keysym) ([]xproto.Keycode, error) {
	var taken []xproto.Keycode
	for _, ks := range need {
		if _, ok := km.where[ks]; ok {
			continue
		}
		if len(km.spare) == 0 {
			break
		}
		code := km.spare[0]
		km.spare = km.spare[1:]
		if err := xproto.ChangeKeyboardMappingChecked(x.conn, 1, code, 2, []xproto.Keysym{ks, ks}).Check(); err != nil {
			x.restore(km, taken)
			return nil, fmt.Errorf("changing the keyboard mapping: %w", err)
		}
		km.where[ks] = keyPos{code: code}
		taken = append(taken, code)
	}
	return taken, nil
}

// restore empties the keycodes remap took.
func (x *xserver) restore(km *keymap, codes []xproto.Keycode) error {
	var first error
	for _, code := range codes {
		empty := make([]xproto.Keysym, km.per)
		if err := xproto.ChangeKeyboardMappingChecked(x.conn, 1, code, byte(km.per), empty).Check(); err != nil && first == nil {
			first = fmt.Errorf("restoring the keyboard mapping: %w", err)
		}
	}
	return first
}

func (x *xserver) key(code xproto.Keycode, down bool) {
	typ := byte(xproto.KeyRelease)
	if down {
		typ = xproto.KeyPress
	}
	xtest.FakeInput(x.conn, typ, byte(code), 0, x.root, 0, 0, 0)
}

// sync waits until the server has handled every request sent so far.
func (x *xserver) sync() error {
	_, err := xproto.GetInputFocus(x.conn).Reply()
	if err != nil {
		return fmt.Errorf("talking to the X server: %w", err)
	}
	return nil
}

// withKeys places keys on the keyboard km describes (remapping spare
// keycodes for those it lacks), runs fn, and puts the mapping back.
// Keys beyond what the spare keycodes can hold are an error.
func (d *Display) withKeys(ctx context.Context, x *xserver, km *keymap, keys []xproto.Keysym, fn func() error) error {
	if missing := km.missing(keys); missing > len(km.spare) {
		return errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf(
			"%d of the keys are not on the keyboard and there are only %d spare keys to place them on: press fewer at a time",
			missing, len(km.spare)))
	}
	taken, err := x.remap(km, uniqueKeysyms(keys))
	if err != nil {
		return errdefs.WithMessage(errdefs.ErrFailedPrecondition,
			fmt.Sprintf("cannot place the characters the keyboard lacks on spare keys (%v): type only what the keyboard mapping has", err))
	}
	if len(taken) > 0 {
		if err := x.sync(); err != nil {
			return err
		}
		d.sleep(ctx, remapSettle)
	}
	runErr := fn()
	if len(taken) > 0 {
		if err := x.sync(); err != nil && runErr == nil {
			runErr = err
		}
		d.sleep(context.Background(), restoreSettle)
		if err := x.restore(km, taken); err != nil && runErr == nil {
			runErr = err
		}
	}
	return runErr
}

// missing counts the different keysyms of keys the mapping lacks.
func (km *keymap) missing(keys []xproto.Keysym) int {
	n := 0
	for _, ks := range uniqueKeysyms(keys) {
		if _, ok := km.where[ks]; !ok {
			n++
		}
	}
	return n
}

// typeText types text in rounds, each of as many characters as can be
// placed on the keyboard at once (different missing ones no more than the
// spare keys), a round trip every typeChunk characters.
func (d *Display) typeText(ctx context.Context, x *xserver, text string) error {
	runes := []rune(text)
	syms := make([]xproto.Keysym, len(runes))
	for i, r := range runes {
		ks, ok := runeKeysym(r)
		if !ok {
			return errdefs.WithMessage(errdefs.ErrInvalidArgument,
				fmt.Sprintf("character %U at position %d cannot be typed (a control character): send text, newlines and tabs only; press other keys with the key action", r, i))
		}
		syms[i] = ks
	}
	for len(syms) > 0 {
		km, err := x.readKeymap()
		if err != nil {
			return err
		}
		n := 1
		for n < len(syms) && km.missing(syms[:n+1]) <= len(km.spare) {
			n++
		}
		round := syms[:n]
		syms = syms[n:]
		err = d.withKeys(ctx, x, km, round, func() error {
			for i, ks := range round {
				pos := km.where[ks]
				if pos.shift {
					x.key(km.shift, true)
				}
				x.key(pos.code, true)
				x.key(pos.code, false)
				if pos.shift {
					x.key(km.shift, false)
				}
				if (i+1)%typeChunk == 0 {
					if err := x.sync(); err != nil {
						return err
					}
					if err := ctx.Err(); err != nil {
						return err
					}
				}
			}
			return x.sync()
		})
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// pressCombo presses the keys of combo in order (adding Shift for a key
// that needs it), and returns the function that releases them in reverse.
func pressCombo(x *xserver, km *keymap, combo []xproto.Keysym) (release func()) {
	var down []xproto.Keycode
	shiftDown := false
	for _, ks := range combo {
		pos := km.where[ks]
		if pos.code == km.shift {
			shiftDown = true
		}
		if pos.shift && !shiftDown {
			x.key(km.shift, true)
			down = append(down, km.shift)
			shiftDown = true
		}
		x.key(pos.code, true)
		down = append(down, pos.code)
	}
	return func() {
		for i := len(down) - 1; i >= 0; i-- {
			x.key(down[i], false)
		}
	}
}

func uniqueKeysyms(keys []xproto.Keysym) []xproto.Keysym {
	seen := make(map[xproto.Keysym]bool, len(keys))
	var out []xproto.Keysym
	for _, ks := range keys {
		if !seen[ks] {
			seen[ks] = true
			out = append(out, ks)
		}
	}
	return out
}
