package client

import (
	"context"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
)

// UpdateNetwork changes a running sandbox's network rules: the lists req
// sets replace the sandbox's, the others stay. It returns the sandbox
// with its whole new rules.
func (c *Client) UpdateNetwork(ctx context.Context, req *reinsv1.UpdateNetworkRequest) (*reinsv1.Sandbox, error) {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	resp, err := c.sandboxes.UpdateNetwork(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg.Sandbox, nil
}

// EgressLog calls fn with each entry of sandbox id's egress log after
// afterSeq; with follow it goes on with new entries until the sandbox is
// removed (or ctx ends). An error from fn stops it and is returned.
func (c *Client) EgressLog(ctx context.Context, id string, afterSeq int64, follow bool, fn func(*reinsv1.EgressLogEntry) error) error {
	stream, err := c.sandboxes.EgressLog(ctx, connect.NewRequest(&reinsv1.EgressLogRequest{Id: id, AfterSeq: afterSeq, Follow: follow}))
	if err != nil {
		return c.wrap(err)
	}
	return receive(c, stream, fn)
}

// receive calls fn with each message of a server stream until it ends
// (its error, wrapped) or fn fails (fn's error).
func receive[T any](c *Client, stream *connect.ServerStreamForClient[T], fn func(*T) error) error {
	defer stream.Close()
	for stream.Receive() {
		if err := fn(stream.Msg()); err != nil {
			return err
		}
	}
	return c.wrap(stream.Err())
}
