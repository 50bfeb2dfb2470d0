package server

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// Pausers is what Pause needs of the sandboxes: the manager has it.
type Pausers interface {
	Pause(ctx context.Context, tenant, id string, orSuspend bool) (info sandbox.Info, suspendedInstead bool, memoryBytes int64, err error)
}

// WithPausers serves Pause.
func (s *Server) WithPausers(p Pausers) *Server {
	s.pausers = p
	return s
}

// Pause keeps a running sandbox's memory and processes and releases its
// compute (decision 0035); resume continues them.
func (s *Server) Pause(ctx context.Context, req *connect.Request[reinsv1.PauseSandboxRequest]) (*connect.Response[reinsv1.PauseSandboxResponse], error) {
	if s.pausers == nil {
		return nil, fmt.Errorf("this service cannot pause sandboxes: %w", errdefs.ErrUnimplemented)
	}
	info, instead, n, err := s.pausers.Pause(ctx, tenant(ctx), req.Msg.Id, req.Msg.OrSuspend)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.PauseSandboxResponse{Sandbox: RecordToProto(info), SuspendedInstead: instead, MemoryBytes: n}), nil
}
