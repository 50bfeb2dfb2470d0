package sandbox

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/reinsdev/reins/errdefs"
)

// DisplayLabel is the image config label that gives an image a display:
// its value is the default screen size ("1280x800"). The executor of a
// sandbox made from such an image is started with --display at the
// sandbox's Screen (or this size), and starts an X server on the first
// computer call.
const DisplayLabel = "dev.reins.display"

// DefaultScreen is the desktop image's screen size: what Anthropic's
// computer-use guidance recommends (at most 1280x800, so that screenshots
// reach the model unscaled).
const DefaultScreen = "1280x800"

// Bounds of a screen: big enough for a phone-sized page, small enough that
// one frame (4 bytes a pixel) stays under 64 MiB.
const (
	MinScreenSide = 320
	MaxScreenSide = 4096
)

// ParseScreen reads "WIDTHxHEIGHT", each side between MinScreenSide and
// MaxScreenSide.
func ParseScreen(s string) (width, height int, err error) {
	ws, hs, ok := strings.Cut(strings.ToLower(strings.TrimSpace(s)), "x")
	w, werr := strconv.Atoi(ws)
	h, herr := strconv.Atoi(hs)
	switch {
	case !ok || werr != nil || herr != nil:
		return 0, 0, errdefs.WithMessage(errdefs.ErrInvalidArgument,
			fmt.Sprintf("screen %.40q is not WIDTHxHEIGHT in pixels: write it like %s", s, DefaultScreen))
	case w < MinScreenSide || h < MinScreenSide || w > MaxScreenSide || h > MaxScreenSide:
		return 0, 0, errdefs.WithMessage(errdefs.ErrInvalidArgument,
			fmt.Sprintf("screen %.40q is out of bounds: each side must be %d to %d pixels", s, MinScreenSide, MaxScreenSide))
	}
	return w, h, nil
}
