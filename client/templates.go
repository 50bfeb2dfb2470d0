package client

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
)

// BuildTemplate runs a template build, calling progress (if not nil) with
// each step, its output and its cache hits, and returns the template.
// Cancelling ctx cancels the build; the steps it finished stay cached.
func (c *Client) BuildTemplate(ctx context.Context, req *reinsv1.BuildTemplateRequest, progress func(*reinsv1.TemplateProgress)) (*reinsv1.Template, error) {
	stream, err := c.sandboxes.BuildTemplate(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, c.wrap(err)
	}
	defer stream.Close()
	for stream.Receive() {
		switch m := stream.Msg().Msg.(type) {
		case *reinsv1.BuildTemplateResponse_Progress:
			if progress != nil {
				progress(m.Progress)
			}
		case *reinsv1.BuildTemplateResponse_Template:
			return m.Template, nil
		}
	}
	if err := stream.Err(); err != nil {
		return nil, c.wrap(err)
	}
	return nil, errors.New("the service ended the build stream without a template")
}

// ListTemplates returns the caller's templates.
func (c *Client) ListTemplates(ctx context.Context) ([]*reinsv1.Template, error) {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	resp, err := c.sandboxes.ListTemplates(ctx, connect.NewRequest(&reinsv1.ListTemplatesRequest{}))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg.Templates, nil
}

// DeleteTemplate removes one of the caller's templates.
func (c *Client) DeleteTemplate(ctx context.Context, name string) error {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	_, err := c.sandboxes.DeleteTemplate(ctx, connect.NewRequest(&reinsv1.DeleteTemplateRequest{Name: name}))
	return c.wrap(err)
}
