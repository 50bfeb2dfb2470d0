package image

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/reinsdev/reins/errdefs"
)

func (s *Store) resolveOCI(ctx context.Context, r *parsedRef, report func(Progress)) (*Image, error) {
	img, err := s.layoutImage(r)
	if err != nil {
		return nil, err
	}
	p, err := pendingImage(img, PhaseUnpack)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", r.orig, err)
	}
	out, err := s.install(ctx, r.key, "", p, report)
	if err != nil {
		if errdefs.Kind(err) == nil {
			err = fmt.Errorf("%w: %w", errdefs.ErrInternal, err)
		}
		return nil, fmt.Errorf("image %q: %w", r.orig, err)
	}
	return out, nil
}

// layoutImage picks the image r selects in an OCI layout: by tag
// (org.opencontainers.image.ref.name), by digest, or the only one there is.
func (s *Store) layoutImage(r *parsedRef) (v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(r.path)
	if err != nil {
		kind := errdefs.ErrInvalidArgument
		if errors.Is(err, os.ErrNotExist) {
			kind = errdefs.ErrNotFound
		}
		return nil, &kindError{msg: fmt.Sprintf("image %q: no OCI layout at %s: %v", r.orig, r.path, err), kind: kind, cause: err}
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", r.orig, err)
	}
	var found []v1.Descriptor
	var names []string
	for _, m := range im.Manifests {
		refName := m.Annotations["org.opencontainers.image.ref.name"]
		names = append(names, cmp.Or(refName, m.Digest.String()))
		switch {
		case r.sel == "",
			strings.HasPrefix(r.sel, "@") && m.Digest.String() == r.sel[1:],
			strings.HasPrefix(r.sel, ":") && refName == r.sel[1:]:
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		what := "no image matches"
		if len(found) > 1 {
			what = "several images match; add :TAG or @DIGEST"
		}
		return nil, &kindError{
			msg:  fmt.Sprintf("image %q: %s in the layout (it has: %s)", r.orig, what, strings.Join(names, ", ")),
			kind: errdefs.ErrNotFound,
		}
	}
	d := found[0]
	if d.MediaType.IsIndex() {
		child, err := idx.ImageIndex(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("image %q: %w", r.orig, err)
		}
		h, err := s.pickPlatform(r, child)
		if err != nil {
			return nil, err
		}
		return child.Image(h)
	}
	return idx.Image(d.Digest)
}

func (s *Store) resolveDockerArchive(ctx context.Context, r *parsedRef, report func(Progress)) (*Image, error) {
	if _, err := os.Stat(r.path); err != nil {
		return nil, &kindError{msg: fmt.Sprintf("image %q: %v", r.orig, err), kind: errdefs.ErrNotFound, cause: err}
	}
	img, err := tarball.ImageFromPath(r.path, nil)
	if err != nil {
		return nil, &kindError{msg: fmt.Sprintf("image %q: not a docker save archive: %v", r.orig, err), kind: errdefs.ErrInvalidArgument, cause: err}
	}
	// The archive holds no manifest and uncompressed layers: asking for a
	// manifest digest would compress every layer. The config digest (the
	// "image ID") names the image instead.
	digest, err := img.ConfigName()
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", r.orig, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", r.orig, err)
	}
	p := &pending{digest: digest.String(), config: cf.Config}
	for _, d := range cf.RootFS.DiffIDs {
		l, err := img.LayerByDiffID(d)
		if err != nil {
			return nil, fmt.Errorf("image %q: %w", r.orig, err)
		}
		p.layers = append(p.layers, layerSource{diffID: d.String(), phase: PhaseUnpack, open: l.Uncompressed})
	}
	out, err := s.install(ctx, r.key, "", p, report)
	if err != nil {
		if errdefs.Kind(err) == nil {
			err = fmt.Errorf("%w: %w", errdefs.ErrInternal, err)
		}
		return nil, fmt.Errorf("image %q: %w", r.orig, err)
	}
	return out, nil
}
