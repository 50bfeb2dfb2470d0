package client

import (
	"context"

	"connectrpc.com/connect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
)

// Computer runs one computer action on the sandbox's display and returns
// what it answered (a screenshot when one was asked for or taken).
func (c *Client) Computer(ctx context.Context, req *executorv1.ComputerRequest) (*executorv1.ComputerResponse, error) {
	resp, err := c.rpc.Computer(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}
