package server

// Stubs of issue 11's calls until their owners build them (decision 0032).

import (
	"context"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/errdefs"
)

func (s *Server) Suspend(ctx context.Context, req *connect.Request[reinsv1.SuspendSandboxRequest]) (*connect.Response[reinsv1.SuspendSandboxResponse], error) {
	if _, err := s.m.Get(ctx, tenant(ctx), req.Msg.Id); err != nil {
		return nil, err
	}
	return nil, errdefs.WithMessage(errdefs.ErrUnimplemented, "this service cannot Suspend yet")
}

func (s *Server) Resume(ctx context.Context, req *connect.Request[reinsv1.ResumeSandboxRequest]) (*connect.Response[reinsv1.ResumeSandboxResponse], error) {
	if _, err := s.m.Get(ctx, tenant(ctx), req.Msg.Id); err != nil {
		return nil, err
	}
	return nil, errdefs.WithMessage(errdefs.ErrUnimplemented, "this service cannot Resume yet")
}

func (s *Server) Events(ctx context.Context, req *connect.Request[reinsv1.SandboxEventsRequest], stream *connect.ServerStream[reinsv1.SandboxLifecycleEvent]) error {
	if req.Msg.Id != "" {
		if _, err := s.m.Get(ctx, tenant(ctx), req.Msg.Id); err != nil {
			return err
		}
	}
	return errdefs.WithMessage(errdefs.ErrUnimplemented, "this service cannot Events yet")
}
