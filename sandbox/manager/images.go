package manager

import (
	"context"

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
		Screen: img.Config.Labels[sandbox.DisplayLabel]}, nil
}
