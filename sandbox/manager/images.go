package manager

import (
	"context"
	"fmt"
	"strings"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/image"
	"github.com/reinsdev/reins/sandbox"
)

// ImageStore adapts an image.Store to Images.
func ImageStore(s *image.Store) Images { return imageStore{s} }

type imageStore struct{ s *image.Store }

func (i imageStore) Resolve(ctx context.Context, ref string, progress func(sandbox.Progress)) (Image, error) {
	img, err := i.s.Resolve(ctx, ref, func(p image.Progress) {
		progress(sandbox.Progress{Phase: p.Phase, Item: p.Layer, Done: p.Done, Total: p.Total, Message: p.Message})
	})
	if err != nil {
		return Image{}, err
	}
	return Image{Digest: img.Digest, Layers: img.Layers, Env: img.Config.Env, WorkingDir: img.Config.WorkingDir,
		Screen: img.Config.Labels[sandbox.DisplayLabel], Size: img.Size, Cached: img.Cached}, nil
}

// ResolveImage resolves ref as Create would for tenant ("" the admin; a
// tenant's image comes anonymously from a public registry and is never a
// path on the host), pulling or building it if the store lacks it, and
// makes no sandbox: so that a later Create starts at once. "" is the
// default image; snapshot: and template: names are refused, being made
// already.
func (m *Manager) ResolveImage(ctx context.Context, tenant, ref string, progress func(sandbox.Progress)) (sandbox.ImageInfo, error) {
	if ref == "" {
		ref = m.cfg.DefaultImage
	}
	switch {
	case strings.HasPrefix(ref, SnapshotPrefix) || strings.HasPrefix(ref, "template:"):
		return sandbox.ImageInfo{}, errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf(
			"%q is a snapshot or a template, made already: build an image reference instead (busybox, debian, agents, desktop or a registry image)", ref))
	case tenant != "" && image.NamesHostPath(ref):
		return sandbox.ImageInfo{}, errdefs.WithMessage(errdefs.ErrPermissionDenied,
			"images from a path on the service's host (oci:, docker-archive:) are the operator's: use a registry image, or ask the operator to load it")
	}
	if progress == nil {
		progress = func(sandbox.Progress) {}
	}
	rctx := ctx
	if tenant != "" {
		rctx = image.Untrusted(ctx)
	}
	img, err := m.cfg.Images.Resolve(rctx, ref, progress)
	if err != nil {
		return sandbox.ImageInfo{}, err
	}
	return sandbox.ImageInfo{Ref: ref, Digest: img.Digest, Size: img.Size, Cached: img.Cached, Screen: img.Screen}, nil
}
