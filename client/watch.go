package client

import (
	"context"

	"connectrpc.com/connect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
)

// Watch streams the changes the executor sees under req.Path (its first
// event is Started) to on, until ctx ends, on returns an error (returned)
// or the executor ends the watch.
func (s *Sandbox) Watch(ctx context.Context, req *executorv1.WatchRequest, on func(*executorv1.WatchEvent) error) error {
	stream, err := s.rpc.Watch(ctx, connect.NewRequest(req))
	if err != nil {
		return s.c.wrap(err)
	}
	defer stream.Close()
	for stream.Receive() {
		if err := on(stream.Msg()); err != nil {
			return err
		}
	}
	return s.c.wrap(stream.Err())
}
