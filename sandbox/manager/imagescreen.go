package manager

import (
	"context"
	"strings"

	"github.com/reinsdev/reins/image"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/template"
)

// ImageScreen is the display size ("1280x800") a sandbox of tenant's
// image would have, "" when it has none: the image's sandbox.DisplayLabel
// for an image reference (which resolves it: the first use of desktop
// builds it, minutes, then it is cached); the screen of the image
// underneath for a snapshot or a template. Another tenant's snapshot or
// template is not found, as a missing one.
func (m *Manager) ImageScreen(ctx context.Context, tenant, image string) (string, error) {
	return m.imageScreen(ctx, tenant, image, 0)
}

func (m *Manager) imageScreen(ctx context.Context, tenant, ref string, depth int) (string, error) {
	if depth > 4 { // a template of a snapshot of a template…: a loop
		return "", nil
	}
	if strings.HasPrefix(ref, template.Prefix) {
		spec := sandbox.Spec{Image: ref}
		t, err := m.templateOf(tenant, &spec)
		if err != nil {
			return "", err
		}
		ref = SnapshotPrefix + t.Snapshot
	}
	if digest, ok := strings.CutPrefix(ref, SnapshotPrefix); ok {
		s, err := m.resolveSnapshot(tenant, digest)
		if err != nil || s.ImageScreen != "" {
			return s.ImageScreen, err
		}
		// A snapshot recorded before screens were: its image's.
		return m.imageScreen(ctx, tenant, s.Image, depth+1)
	}
	rctx := ctx
	if tenant != "" {
		rctx = image.Untrusted(ctx)
	}
	img, err := m.cfg.Images.Resolve(rctx, ref, func(sandbox.Progress) {})
	return img.Screen, err
}
