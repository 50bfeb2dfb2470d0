package server

// Stubs of issue 11's calls until their owners build them (decision 0032).

import (
	"context"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/errdefs"
)

func (s *Server) Snapshot(ctx context.Context, req *connect.Request[reinsv1.SnapshotSandboxRequest]) (*connect.Response[reinsv1.SnapshotSandboxResponse], error) {
	if _, err := s.m.Get(ctx, tenant(ctx), req.Msg.Id); err != nil {
		return nil, err
	}
	return nil, errdefs.WithMessage(errdefs.ErrUnimplemented, "this service cannot Snapshot yet")
}

func (s *Server) Fork(ctx context.Context, req *connect.Request[reinsv1.ForkSandboxRequest]) (*connect.Response[reinsv1.ForkSandboxResponse], error) {
	if _, err := s.m.Get(ctx, tenant(ctx), req.Msg.Id); err != nil {
		return nil, err
	}
	return nil, errdefs.WithMessage(errdefs.ErrUnimplemented, "this service cannot Fork yet")
}

func (s *Server) ListSnapshots(ctx context.Context, req *connect.Request[reinsv1.ListSnapshotsRequest]) (*connect.Response[reinsv1.ListSnapshotsResponse], error) {
	return nil, errdefs.WithMessage(errdefs.ErrUnimplemented, "this service cannot ListSnapshots yet")
}

func (s *Server) DeleteSnapshot(ctx context.Context, req *connect.Request[reinsv1.DeleteSnapshotRequest]) (*connect.Response[reinsv1.DeleteSnapshotResponse], error) {
	return nil, errdefs.WithMessage(errdefs.ErrUnimplemented, "this service cannot DeleteSnapshot yet")
}
