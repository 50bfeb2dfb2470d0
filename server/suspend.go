package server

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/server/wire"
)

// Suspender is what Suspend, Resume and Events need of the sandboxes: the
// manager has it.
type Suspender interface {
	SuspendSandbox(ctx context.Context, tenant, id string, why sandbox.Reason) (sandbox.Info, sandbox.SnapshotInfo, error)
	Resume(ctx context.Context, tenant, id string) (sandbox.Info, error)
	Events(tenant, id string, afterSeq int64) ([]sandbox.LifecycleEvent, <-chan struct{}, error)
}

// WithSuspender serves Suspend, Resume and Events.
func (s *Server) WithSuspender(x Suspender) *Server {
	s.suspender = x
	return s
}

func (s *Server) needSuspender(what string) error {
	if s.suspender == nil {
		return fmt.Errorf("this service cannot %s sandboxes: %w", what, errdefs.ErrUnimplemented)
	}
	return nil
}

// Suspend saves a running sandbox's workspace and deletes its guest.
func (s *Server) Suspend(ctx context.Context, req *connect.Request[reinsv1.SuspendSandboxRequest]) (*connect.Response[reinsv1.SuspendSandboxResponse], error) {
	if err := s.needSuspender("suspend"); err != nil {
		return nil, err
	}
	info, snap, err := s.suspender.SuspendSandbox(ctx, tenant(ctx), req.Msg.Id, "")
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.SuspendSandboxResponse{Sandbox: RecordToProto(info), Workspace: SnapshotToProto(snap)}), nil
}

// Resume boots a suspended sandbox on its saved workspace, or restores a
// paused one.
func (s *Server) Resume(ctx context.Context, req *connect.Request[reinsv1.ResumeSandboxRequest]) (*connect.Response[reinsv1.ResumeSandboxResponse], error) {
	if err := s.needSuspender("resume"); err != nil {
		return nil, err
	}
	info, err := s.suspender.Resume(ctx, tenant(ctx), req.Msg.Id)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.ResumeSandboxResponse{Sandbox: RecordToProto(info)}), nil
}

// Events streams lifecycle events of one sandbox or all the caller's, from
// after after_seq; with follow it waits for new ones until the caller goes.
func (s *Server) Events(ctx context.Context, req *connect.Request[reinsv1.SandboxEventsRequest], stream *connect.ServerStream[reinsv1.SandboxLifecycleEvent]) error {
	if err := s.needSuspender("show the events of"); err != nil {
		return err
	}
	after := req.Msg.AfterSeq
	for {
		evs, more, err := s.suspender.Events(tenant(ctx), req.Msg.Id, after)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if err := stream.Send(EventToProto(e)); err != nil {
				return err
			}
			after = e.Seq
		}
		if !req.Msg.Follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-more:
		}
	}
}

// EventToProto converts a lifecycle event for the wire.
func EventToProto(e sandbox.LifecycleEvent) *reinsv1.SandboxLifecycleEvent {
	return &reinsv1.SandboxLifecycleEvent{
		Seq: e.Seq, Sandbox: e.Sandbox, TimeUnixNano: nano(e.Time), Kind: e.Kind,
		Reason: wire.SandboxReason(e.Reason), Message: e.Message, AtUnixNano: nano(e.At), Snapshot: e.Snapshot,
	}
}
