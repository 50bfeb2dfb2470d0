package server

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// Expiries is what Extend needs of the sandboxes: the manager has it.
type Expiries interface {
	Extend(ctx context.Context, tenant, id string, ttl time.Duration) (sandbox.Info, error)
}

// WithExpiries serves Extend.
func (s *Server) WithExpiries(e Expiries) *Server {
	s.expiries = e
	return s
}

// Extend sets a sandbox's expiry to ttl_ms from now.
func (s *Server) Extend(ctx context.Context, req *connect.Request[reinsv1.ExtendSandboxRequest]) (*connect.Response[reinsv1.ExtendSandboxResponse], error) {
	if s.expiries == nil {
		return nil, fmt.Errorf("this service cannot change a sandbox's expiry: %w", errdefs.ErrUnimplemented)
	}
	info, err := s.expiries.Extend(ctx, tenant(ctx), req.Msg.Id, time.Duration(req.Msg.TtlMs)*time.Millisecond)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.ExtendSandboxResponse{Sandbox: RecordToProto(info)}), nil
}
