package server

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/errdefs"
)

// RunCommand runs one command to completion and answers its bounded
// output (the unary call for callers without a streaming client).
func (s *Server) RunCommand(ctx context.Context, req *connect.Request[reinsv1.RunCommandRequest]) (*connect.Response[reinsv1.RunCommandResponse], error) {
	// The sandbox is found first, so another tenant's is answered as a
	// missing one whatever else the request says.
	if _, err := s.m.Executor(ctx, tenant(ctx), req.Msg.SandboxId); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("RunCommand is not built yet: %w", errdefs.ErrUnimplemented)
}
