package image

import (
	"io"
	"os"

	"github.com/reinsdev/reins/archive"
)

// Layer caps: a layer's tar may claim no more file content or entries than
// these (a gzip bomb stops here, not at a full disk).
const (
	maxLayerBytes   = 64 << 30
	maxLayerEntries = 4 << 20
)

// opaqueXattr marks a directory opaque in overlayfs's form (the xattr
// archive.OverlayWhiteouts sets).
const opaqueXattr = "trusted.overlay.opaque"

// unpackTar extracts the layer's tar stream r into dir, a new empty
// directory, through the one hardened extractor (package archive): whiteouts
// become overlayfs ones; device nodes, fifos and anything that would land
// outside dir are refused. A refused layer leaves dir partly filled; the
// caller unpacks into a temporary directory and renames it into place only
// on success.
func unpackTar(r io.Reader, dir string) error {
	wh := archive.OverlayWhiteouts
	if os.Geteuid() != 0 {
		wh = archive.UserOverlayWhiteouts // only root sets trusted.* attributes
	}
	opts := archive.Options{Whiteouts: wh, Layer: true, MaxBytes: maxLayerBytes, MaxEntries: maxLayerEntries}
	_, _, err := opts.Extract(r, dir)
	return err
}
