package tool

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/reinsdev/reins/errdefs"
)

// MaxImageBytes is the largest image a tool result may carry. A 1280x800
// screenshot of a busy page is about 1-2 MiB as PNG; anything far bigger
// came from a sandbox that is not playing fair.
const MaxImageBytes = 8 << 20

// MaxImageSide bounds each side of an image a tool result carries (the
// largest screen a sandbox may have, sandbox.ParseScreen's bound).
const MaxImageSide = 4096

var pngSignature = []byte("\x89PNG\r\n\x1a\n")

// CheckPNG checks, without decoding it, that b is a PNG of a size the loop
// keeps: at most MaxImageBytes, and a header (the IHDR chunk) naming sides
// of 1..MaxImageSide. It returns the sides. The bytes came from a sandbox:
// nothing on the host decodes them before this check.
func CheckPNG(b []byte) (width, height int, err error) {
	if len(b) > MaxImageBytes {
		return 0, 0, fmt.Errorf("the image is %d bytes, over the limit of %d MiB: %w", len(b), MaxImageBytes>>20, errdefs.ErrTooLarge)
	}
	return PNGSize(b)
}

// PNGSize reads the sides of the PNG b from its header (the IHDR chunk),
// without decoding it, and refuses what is not a PNG or names sides
// outside 1..MaxImageSide. Every reader of a sandbox's screenshot on the
// host (the loop, the CLI, the live view) checks it with this before
// anything else touches the bytes; each bounds the length itself.
func PNGSize(b []byte) (width, height int, err error) {
	// signature, then the IHDR chunk: length 13, "IHDR", width, height.
	if len(b) < 8+8+8 || !bytes.Equal(b[:8], pngSignature) || binary.BigEndian.Uint32(b[8:12]) != 13 || string(b[12:16]) != "IHDR" {
		return 0, 0, fmt.Errorf("the image is not a PNG: %w", errdefs.ErrInvalidArgument)
	}
	w, h := binary.BigEndian.Uint32(b[16:20]), binary.BigEndian.Uint32(b[20:24])
	if w == 0 || h == 0 || w > MaxImageSide || h > MaxImageSide {
		return 0, 0, fmt.Errorf("the PNG is %dx%d, outside 1..%d pixels a side: %w", w, h, MaxImageSide, errdefs.ErrInvalidArgument)
	}
	return int(w), int(h), nil
}
