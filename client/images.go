package client

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
)

// BuildImage resolves (builds, pulls) an image on the service ahead of a
// Create, calling progress with each report.
func (c *Client) BuildImage(ctx context.Context, ref string, progress func(*reinsv1.Progress)) (*reinsv1.ImageInfo, error) {
	stream, err := c.sandboxes.BuildImage(ctx, connect.NewRequest(&reinsv1.BuildImageRequest{Image: ref}))
	if err != nil {
		return nil, c.wrap(err)
	}
	defer stream.Close()
	for stream.Receive() {
		switch m := stream.Msg().Msg.(type) {
		case *reinsv1.BuildImageResponse_Progress:
			if progress != nil {
				progress(m.Progress)
			}
		case *reinsv1.BuildImageResponse_Image:
			return m.Image, nil
		}
	}
	if err := stream.Err(); err != nil {
		return nil, c.wrap(err)
	}
	return nil, errors.New("the service ended the build stream without an image")
}
