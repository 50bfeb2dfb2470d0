package client

import (
	"context"
	"net/url"
	"time"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
)

// ViewURL returns the URL of a desktop sandbox's live view. A public one
// is a signed link that works until it expires (ttl 0: one hour), and
// takes over only with takeover. Without public, the URL carries this
// client's token in its fragment (#token=...), which a browser never
// sends and the page turns into a cookie for that view only.
func (c *Client) ViewURL(ctx context.Context, id string, public, takeover bool, ttl time.Duration) (*reinsv1.ViewURLResponse, error) {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	resp, err := c.sandboxes.ViewURL(ctx, connect.NewRequest(&reinsv1.ViewURLRequest{
		Id: id, Public: public, Takeover: takeover, TtlMs: ttl.Milliseconds(),
	}))
	if err != nil {
		return nil, c.wrap(err)
	}
	if !public {
		resp.Msg.Url += "#token=" + url.QueryEscape(c.token)
	}
	return resp.Msg, nil
}

// TakeOver holds a sandbox's screen for a person named by ("" : the
// caller's tenant); a run's computer calls wait until HandBack.
func (c *Client) TakeOver(ctx context.Context, id, by string) (*reinsv1.TakeOverResponse, error) {
	return c.takeOver(ctx, &reinsv1.TakeOverRequest{Id: id, By: by})
}

// HandBack lets go of a sandbox's screen.
func (c *Client) HandBack(ctx context.Context, id string) error {
	_, err := c.takeOver(ctx, &reinsv1.TakeOverRequest{Id: id, HandBack: true})
	return err
}

func (c *Client) takeOver(ctx context.Context, req *reinsv1.TakeOverRequest) (*reinsv1.TakeOverResponse, error) {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	resp, err := c.sandboxes.TakeOver(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg, nil
}
