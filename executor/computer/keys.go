package computer

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/jezek/xgb/xproto"

	"github.com/reinsdev/reins/errdefs"
)

// Well-known keysyms.
const (
	ksReturn  xproto.Keysym = 0xff0d
	ksTab     xproto.Keysym = 0xff09
	ksKPEnter xproto.Keysym = 0xff8d
	ksShiftL  xproto.Keysym = 0xffe1
)

// keysyms is the keysyms by name: the X11 names (as xdotool takes them) of
// the keys that are not characters. Characters are named by themselves
// ("a", "é", "/") or by their X11 names below (space, slash, ...). Made on
// first use: an executor without a display never pays for the tables.
var keysyms = sync.OnceValue(func() map[string]xproto.Keysym {
	return map[string]xproto.Keysym{
		"BackSpace": 0xff08, "Tab": 0xff09, "Linefeed": 0xff0a, "Clear": 0xff0b, "Return": 0xff0d,
		"Pause": 0xff13, "Scroll_Lock": 0xff14, "Sys_Req": 0xff15, "Escape": 0xff1b, "Delete": 0xffff,
		"Home": 0xff50, "Left": 0xff51, "Up": 0xff52, "Right": 0xff53, "Down": 0xff54,
		"Prior": 0xff55, "Page_Up": 0xff55, "Next": 0xff56, "Page_Down": 0xff56, "End": 0xff57, "Begin": 0xff58,
		"Select": 0xff60, "Print": 0xff61, "Execute": 0xff62, "Insert": 0xff63, "Undo": 0xff65, "Redo": 0xff66,
		"Menu": 0xff67, "Find": 0xff68, "Cancel": 0xff69, "Help": 0xff6a, "Break": 0xff6b,
		"Mode_switch": 0xff7e, "Num_Lock": 0xff7f,
		"KP_Space": 0xff80, "KP_Tab": 0xff89, "KP_Enter": 0xff8d,
		"KP_F1": 0xff91, "KP_F2": 0xff92, "KP_F3": 0xff93, "KP_F4": 0xff94,
		"KP_Home": 0xff95, "KP_Left": 0xff96, "KP_Up": 0xff97, "KP_Right": 0xff98, "KP_Down": 0xff99,
		"KP_Prior": 0xff9a, "KP_Page_Up": 0xff9a, "KP_Next": 0xff9b, "KP_Page_Down": 0xff9b,
		"KP_End": 0xff9c, "KP_Begin": 0xff9d, "KP_Insert": 0xff9e, "KP_Delete": 0xff9f,
		"KP_Multiply": 0xffaa, "KP_Add": 0xffab, "KP_Separator": 0xffac, "KP_Subtract": 0xffad,
		"KP_Decimal": 0xffae, "KP_Divide": 0xffaf, "KP_Equal": 0xffbd,
		"Shift_L": 0xffe1, "Shift_R": 0xffe2, "Control_L": 0xffe3, "Control_R": 0xffe4,
		"Caps_Lock": 0xffe5, "Shift_Lock": 0xffe6, "Meta_L": 0xffe7, "Meta_R": 0xffe8,
		"Alt_L": 0xffe9, "Alt_R": 0xffea, "Super_L": 0xffeb, "Super_R": 0xffec,
		"Hyper_L": 0xffed, "Hyper_R": 0xffee, "ISO_Level3_Shift": 0xfe03, "ISO_Left_Tab": 0xfe20,
		"space": 0x20, "exclam": 0x21, "quotedbl": 0x22, "numbersign": 0x23, "dollar": 0x24,
		"percent": 0x25, "ampersand": 0x26, "apostrophe": 0x27, "parenleft": 0x28, "parenright": 0x29,
		"asterisk": 0x2a, "plus": 0x2b, "comma": 0x2c, "minus": 0x2d, "period": 0x2e, "slash": 0x2f,
		"colon": 0x3a, "semicolon": 0x3b, "less": 0x3c, "equal": 0x3d, "greater": 0x3e, "question": 0x3f,
		"at": 0x40, "bracketleft": 0x5b, "backslash": 0x5c, "bracketright": 0x5d, "asciicircum": 0x5e,
		"underscore": 0x5f, "grave": 0x60, "braceleft": 0x7b, "bar": 0x7c, "braceright": 0x7d, "asciitilde": 0x7e,
		"XF86MonBrightnessUp": 0x1008ff02, "XF86MonBrightnessDown": 0x1008ff03,
		"XF86AudioLowerVolume": 0x1008ff11, "XF86AudioMute": 0x1008ff12, "XF86AudioRaiseVolume": 0x1008ff13,
		"XF86AudioPlay": 0x1008ff14, "XF86AudioStop": 0x1008ff15, "XF86AudioPrev": 0x1008ff16,
		"XF86AudioNext": 0x1008ff17, "XF86HomePage": 0x1008ff18, "XF86Mail": 0x1008ff19,
		"XF86Search": 0x1008ff1b, "XF86Back": 0x1008ff26, "XF86Forward": 0x1008ff27,
		"XF86Refresh": 0x1008ff29, "XF86Copy": 0x1008ff57, "XF86Cut": 0x1008ff58,
		"XF86Paste": 0x1008ff6d, "XF86Reload": 0x1008ff73,
	}
})

// keyAliases are the short and common names (matched in lower case).
var keyAliases = sync.OnceValue(func() map[string]string {
	return map[string]string{
		"ctrl": "Control_L", "control": "Control_L", "alt": "Alt_L", "shift": "Shift_L",
		"super": "Super_L", "meta": "Super_L", "cmd": "Super_L", "command": "Super_L", "win": "Super_L", "windows": "Super_L",
		"esc": "Escape", "enter": "Return", "return": "Return", "backspace": "BackSpace", "bs": "BackSpace",
		"del": "Delete", "ins": "Insert", "pgup": "Page_Up", "pageup": "Page_Up", "pgdn": "Page_Down",
		"pgdown": "Page_Down", "pagedown": "Page_Down", "arrowup": "Up", "arrowdown": "Down",
		"arrowleft": "Left", "arrowright": "Right", "capslock": "Caps_Lock", "numlock": "Num_Lock",
		"printscreen": "Print", "prtsc": "Print", "scrolllock": "Scroll_Lock", "altgr": "ISO_Level3_Shift",
	}
})

// lowerKeysyms is keysyms by lower-case name, for "page_down", "kp_enter".
var lowerKeysyms = sync.OnceValue(func() map[string]xproto.Keysym {
	m := make(map[string]xproto.Keysym, len(keysyms()))
	for name, ks := range keysyms() {
		m[strings.ToLower(name)] = ks
	}
	return m
})

// KeyForms says what key names are accepted, for errors.
const KeyForms = "a combination of keys joined by + (\"ctrl+l\", \"ctrl+shift+t\", \"alt+F4\"), several separated by spaces; " +
	"each key an X11 key name as xdotool takes them (Return, Tab, Escape, BackSpace, Delete, Home, End, Page_Up, Page_Down, " +
	"Up, Down, Left, Right, Insert, F1..F35, KP_Enter, KP_0..KP_9, Shift_L, Control_L, Alt_L, Super_L, space, minus, ...), " +
	"an alias (ctrl/control, alt, shift, super/meta/cmd/win, esc/escape, enter, backspace, del, pgup, pgdn), or a single character (a, Z, 7, é, /)"

// maxComboKeys bounds the keys of one combination and the combinations of
// one key action.
const maxComboKeys = 16

// parseKeys parses xdotool-style key text into combinations: "ctrl+a
// Delete" is [[Control_L a] [Delete]].
func parseKeys(text string) ([][]xproto.Keysym, error) {
	fields := strings.Fields(text)
	if len(fields) == 0 {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "no key given: text must name the keys, "+KeyForms)
	}
	if len(fields) > maxComboKeys {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument,
			fmt.Sprintf("%d key combinations in one action: at most %d", len(fields), maxComboKeys))
	}
	var combos [][]xproto.Keysym
	for _, f := range fields {
		combo, err := parseCombo(f)
		if err != nil {
			return nil, err
		}
		combos = append(combos, combo)
	}
	return combos, nil
}

// parseCombo parses one combination: "ctrl+shift+t", "ctrl++" (ctrl and +).
func parseCombo(s string) ([]xproto.Keysym, error) {
	parts := strings.Split(s, "+")
	// A "+" key: "ctrl++" splits into "ctrl", "", "".
	if len(parts) > 1 && parts[len(parts)-1] == "" && parts[len(parts)-2] == "" {
		parts = append(parts[:len(parts)-2], "+")
	} else if s == "+" {
		parts = []string{"+"}
	}
	if len(parts) > maxComboKeys {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument,
			fmt.Sprintf("key combination %q has %d keys: at most %d", truncate(s, 40), len(parts), maxComboKeys))
	}
	// "ctrl+C" means ctrl+c, as people and models write it, not
	// ctrl+shift+c (a different command in most programs): a capital
	// letter with modifiers other than Shift is its small letter.
	if last := parts[len(parts)-1]; len(parts) > 1 && len(last) == 1 && last[0] >= 'A' && last[0] <= 'Z' {
		shift := false
		for _, p := range parts[:len(parts)-1] {
			ks, _ := lookupKey(p)
			shift = shift || ks == ksShiftL || ks == keysyms()["Shift_R"]
		}
		if !shift {
			parts[len(parts)-1] = strings.ToLower(last)
		}
	}
	combo := make([]xproto.Keysym, 0, len(parts))
	for _, p := range parts {
		ks, ok := lookupKey(p)
		if !ok {
			return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument,
				fmt.Sprintf("unknown key %q in %q: give %s", truncate(p, 40), truncate(s, 40), KeyForms))
		}
		combo = append(combo, ks)
	}
	return combo, nil
}

// lookupKey finds the keysym of one key name.
func lookupKey(name string) (xproto.Keysym, bool) {
	if ks, ok := keysyms()[name]; ok {
		return ks, true
	}
	lower := strings.ToLower(name)
	if alias, ok := keyAliases()[lower]; ok {
		return keysyms()[alias], true
	}
	if ks, ok := lowerKeysyms()[lower]; ok {
		return ks, true
	}
	if n, ok := strings.CutPrefix(lower, "f"); ok {
		if i, err := strconv.Atoi(n); err == nil && i >= 1 && i <= 35 {
			return xproto.Keysym(0xffbe + i - 1), true // F1..F35
		}
	}
	if n, ok := strings.CutPrefix(lower, "kp_"); ok && len(n) == 1 && n[0] >= '0' && n[0] <= '9' {
		return xproto.Keysym(0xffb0 + int(n[0]-'0')), true
	}
	if r, size := utf8.DecodeRuneInString(name); size == len(name) && r != utf8.RuneError {
		return runeKeysym(r)
	}
	return 0, false
}

// runeKeysym is the keysym that types r: Latin-1 characters are their own
// keysyms, the rest of Unicode is 0x01000000 + the code point; newline and
// tab are Return and Tab. Other control characters have none.
func runeKeysym(r rune) (xproto.Keysym, bool) {
	switch {
	case r == '\n' || r == '\r':
		return ksReturn, true
	case r == '\t':
		return ksTab, true
	case r < 0x20 || (r >= 0x7f && r < 0xa0) || r > utf8.MaxRune:
		return 0, false
	case r < 0x100:
		return xproto.Keysym(r), true
	default:
		return xproto.Keysym(0x01000000 | r), true
	}
}

// KeysymRune is the character a keysym types, or -1 (for tests and the
// keymap: the inverse of runeKeysym).
func KeysymRune(ks xproto.Keysym) rune {
	switch {
	case ks == ksReturn || ks == ksKPEnter:
		return '\n'
	case ks == ksTab:
		return '\t'
	case ks >= 0x20 && ks < 0x7f, ks >= 0xa0 && ks < 0x100:
		return rune(ks)
	case ks&0xff000000 == 0x01000000:
		return rune(ks & 0xffffff)
	}
	return -1
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
