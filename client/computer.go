package client

import (
	"context"
	"time"

	"connectrpc.com/connect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/api/reins/executor/v1/executorv1connect"
)

// MaxComputerAnswer bounds the answer of a computer call, which the
// sandbox writes: a PNG of the largest screen (4096x4096, 4 bytes a
// pixel, stored uncompressed) and its framing fit; more is refused
// unread.
const MaxComputerAnswer = 4096*4096*4 + 8<<20

// Computer runs one computer action on the sandbox's display (the
// executor's Computer call, through the service). Its screenshot is
// still the sandbox's bytes: check them before decoding more than a
// header.
func (s *Sandbox) Computer(ctx context.Context, req *executorv1.ComputerRequest) (*executorv1.ComputerResponse, error) {
	rpc := executorv1connect.NewExecutorClient(s.hc, s.c.URL, connect.WithReadMaxBytes(MaxComputerAnswer))
	// A hold or a wait lasts as long as it says, on top of the usual.
	ctx, cancel := context.WithTimeout(ctx, UnaryTimeout+time.Duration(req.DurationMs+req.ScreenshotDelayMs)*time.Millisecond)
	defer cancel()
	resp, err := rpc.Computer(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, s.c.wrap(err)
	}
	return resp.Msg, nil
}
