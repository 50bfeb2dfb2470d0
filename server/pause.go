package server

// Stubs of issue 11's calls until their owners build them (decision 0032).

import (
	"context"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/errdefs"
)

func (s *Server) Pause(ctx context.Context, req *connect.Request[reinsv1.PauseSandboxRequest]) (*connect.Response[reinsv1.PauseSandboxResponse], error) {
	if _, err := s.m.Get(ctx, tenant(ctx), req.Msg.Id); err != nil {
		return nil, err
	}
	return nil, errdefs.WithMessage(errdefs.ErrUnimplemented, "this service cannot Pause yet")
}
