package server

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/server/wire"
	"github.com/reinsdev/reins/store"
)

// Networks changes the network rules of running sandboxes (the egress
// boundary; see package egress). tenant is as in Lifecycle.
type Networks interface {
	// SetNetwork makes rules (normalized) sandbox id's whole network
	// rules, in effect at once (connections the new rules deny are
	// closed), and returns the sandbox as it now is.
	SetNetwork(ctx context.Context, tenant, id string, rules egress.Rules) (sandbox.Info, error)
}

// EgressLogs reads sandboxes' egress logs (store.EgressLog's, or a
// service's own).
type EgressLogs interface {
	// Egress returns sandbox's entries after afterSeq, oldest first, at
	// most limit; a tenant sees only its own sandboxes' (none of
	// another's).
	Egress(ctx context.Context, tenant, sandboxID string, afterSeq int64, limit int) ([]store.EgressRecord, error)
	// Wait returns nil once sandbox's log has an entry past afterSeq
	// (at once if it has one now), errdefs.ErrNotFound once the sandbox
	// is removed, or ctx's error.
	Wait(ctx context.Context, sandboxID string, afterSeq int64) error
}

// WithNetworks serves UpdateNetwork.
func (s *Server) WithNetworks(n Networks) *Server {
	s.networks = n
	return s
}

// WithEgressLogs serves EgressLog.
func (s *Server) WithEgressLogs(l EgressLogs) *Server {
	s.egress = l
	return s
}

// normalizeNetwork checks rules at the API's edge: the egress package's
// words for what does not parse or is out of bounds (invalid argument),
// and a tenant may not allow a prefix that covers a reserved range
// (permission denied); the admin ("") may.
func normalizeNetwork(ctx context.Context, r egress.Rules) (egress.Rules, error) {
	return r.Normalize(tenant(ctx) == "")
}

// UpdateNetwork replaces the lists the request sets and keeps the others.
func (s *Server) UpdateNetwork(ctx context.Context, req *connect.Request[reinsv1.UpdateNetworkRequest]) (*connect.Response[reinsv1.UpdateNetworkResponse], error) {
	// The sandbox is looked up first, so that another tenant's id is not
	// found exactly as a missing one is, whatever this service serves.
	info, err := s.m.Get(ctx, tenant(ctx), req.Msg.Id)
	if err != nil {
		return nil, err
	}
	if s.networks == nil {
		return nil, fmt.Errorf("this service cannot change a sandbox's network rules: %w", errdefs.ErrUnimplemented)
	}
	rules, err := mergeNetwork(info.Spec.Network, req.Msg)
	if err != nil {
		return nil, err
	}
	// Prefixes the request leaves alone were allowed when they were set
	// (maybe by the admin): a tenant's change of its hosts keeps them.
	admin := tenant(ctx) == "" || req.Msg.AllowCidrs == nil
	if rules, err = rules.Normalize(admin); err != nil {
		return nil, err
	}
	if info, err = s.networks.SetNetwork(ctx, tenant(ctx), req.Msg.Id, rules); err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.UpdateNetworkResponse{Sandbox: RecordToProto(info)}), nil
}

// mergeNetwork applies an update to a sandbox's rules: what the request
// sets replaces, what it leaves unset stays.
func mergeNetwork(r egress.Rules, u *reinsv1.UpdateNetworkRequest) (egress.Rules, error) {
	var err error
	if u.Mode != reinsv1.NetworkMode_NETWORK_MODE_UNSPECIFIED {
		if r.Mode, err = wire.CheckedNetworkMode(u.Mode); err != nil {
			return r, err
		}
	}
	if u.AllowHosts != nil {
		if r.AllowHosts, err = wire.HostRulesFromProto(u.AllowHosts.Items); err != nil {
			return r, err
		}
	}
	if u.DenyHosts != nil {
		if r.DenyHosts, err = wire.HostRulesFromProto(u.DenyHosts.Items); err != nil {
			return r, err
		}
	}
	if u.AllowCidrs != nil {
		if r.AllowCIDRs, err = wire.CIDRsFromProto(u.AllowCidrs.Items); err != nil {
			return r, err
		}
	}
	if u.Secrets != nil {
		r.Secrets = wire.SecretBindingsFromProto(u.Secrets.Items)
	}
	return r, nil
}

// egressPage is how many entries EgressLog reads at once.
const egressPage = 500

// EgressLog streams a sandbox's egress log, and with follow the entries
// that come after, until the sandbox is removed.
func (s *Server) EgressLog(ctx context.Context, req *connect.Request[reinsv1.EgressLogRequest], stream *connect.ServerStream[reinsv1.EgressLogEntry]) error {
	id := req.Msg.Id
	if _, err := s.m.Get(ctx, tenant(ctx), id); err != nil {
		return err
	}
	if s.egress == nil {
		return fmt.Errorf("this service keeps no egress log: %w", errdefs.ErrUnimplemented)
	}
	after := req.Msg.AfterSeq
	send := func() (int, error) {
		recs, err := s.egress.Egress(ctx, tenant(ctx), id, after, egressPage)
		if err != nil {
			return 0, err
		}
		for _, r := range recs {
			if err := stream.Send(wire.EgressEntry(r)); err != nil {
				return 0, err
			}
			after = r.Seq
		}
		return len(recs), nil
	}
	for {
		n, err := send()
		if err != nil {
			return err
		}
		if n == egressPage {
			continue
		}
		if !req.Msg.Follow {
			return nil
		}
		if err := s.egress.Wait(ctx, id, after); errors.Is(err, errdefs.ErrNotFound) {
			// Removed: what it logged before it went, if still there,
			// ends the stream.
			_, err := send()
			if errors.Is(err, errdefs.ErrNotFound) {
				return nil
			}
			return err
		} else if err != nil {
			return err
		}
	}
}
