package manager

import (
	"fmt"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// A sandbox has a display when its image has one (sandbox.DisplayLabel):
// its executor is started with --display at the size screenOf resolved
// at create, which the record keeps (Info.Screen), so every later start
// of it — a resume on a fresh guest, a restore, a restart of the service
// that re-attaches — has the same screen, and so do the sandboxes made
// from its snapshots and forks (SnapshotInfo.ImageScreen).

// checkScreen is normalize's check of a spec's screen: "" or WxH within
// bounds, written canonically ("1024x768").
func checkScreen(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	w, h, err := sandbox.ParseScreen(s)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%dx%d", w, h), nil
}

// screenOf is the display of a sandbox of img made for spec (normalized):
// the spec's screen, else the image's own; "" for an image without a
// display, which refuses a screen. The image's size comes from its config
// label, which whoever published the image chose: it is checked as a
// user's is.
func screenOf(spec sandbox.Spec, img Image) (string, error) {
	switch {
	case img.Screen == "" && spec.Screen != "":
		return "", errdefs.WithMessage(errdefs.ErrInvalidArgument,
			fmt.Sprintf("image %s has no display: --screen needs a desktop image (--image desktop)", truncate(spec.Image, 80)))
	case img.Screen == "":
		return "", nil
	case spec.Screen != "":
		return spec.Screen, nil
	}
	s, err := checkScreen(img.Screen)
	if err != nil {
		return "", fmt.Errorf("image %s, its display (label %s): %w", truncate(spec.Image, 80), sandbox.DisplayLabel, err)
	}
	return s, nil
}

// displayArgs are the executor's arguments for a sandbox with screen.
func displayArgs(screen string) []string {
	if screen == "" {
		return nil
	}
	return []string{"--display", screen}
}
