package manager

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// Network gives sandboxes their network boundary (egress/boundary): a
// namespace, the proxy's rules, secret placeholders. Attach is called at
// every start of a sandbox (again after a restart of the service, when it
// must give the same answer for a sandbox that still runs), Detach when its
// compute is released.
type Network interface {
	// Check refuses, before anything is made, rules the boundary could
	// not give tenant's sandbox (a secret it does not have).
	Check(ctx context.Context, tenant string, rules egress.Rules) error
	Attach(ctx context.Context, req sandbox.NetworkRequest) (sandbox.NetworkConfig, error)
	Update(ctx context.Context, req sandbox.NetworkRequest) error
	Detach(ctx context.Context, id string) error
}

// networkRequest is b's request to the boundary; b.mu is held.
func (m *Manager) networkRequest(b *box) sandbox.NetworkRequest {
	return sandbox.NetworkRequest{
		ID: b.rec.ID, Tenant: b.rec.Tenant, Dir: b.dir, Hostname: hostname(b.rec.ID),
		Rules: b.rec.Spec.Network, Placeholders: b.rec.Placeholders,
	}
}

func hostname(id string) string { return "sandbox-" + id }

// attachNetwork gives b's bundle its network; b.mu is held. Without a
// boundary a sandbox has loopback only (normalize refused rules that
// would need more).
func (m *Manager) attachNetwork(ctx context.Context, b *box, bundle *sandbox.Bundle) error {
	if m.cfg.Network == nil {
		return nil
	}
	nc, err := m.cfg.Network.Attach(ctx, m.networkRequest(b))
	if err != nil {
		return fmt.Errorf("the sandbox's network: %w", err)
	}
	bundle.NetNS = nc.NetNS
	bundle.Env = buildEnv(bundle.Env, nc.Env) // the boundary's win on a clash
	bundle.Mounts = append(bundle.Mounts, nc.Mounts...)
	// Before the listen flags' end: the executor's flags come first.
	bundle.Args = append(bundle.Args, nc.ExecutorArgs...)
	b.rec.Placeholders = nc.Placeholders
	b.rec.NetAddr = nc.Addr
	b.rec.NetEnv = nc.Env
	return nil
}

// timeoutDetach bounds the removal of a sandbox's network.
const timeoutDetach = 10 * time.Second

// detachNetwork removes b's network (at a release of its compute).
func (m *Manager) detachNetwork(b *box) {
	if m.cfg.Network == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeoutDetach)
	defer cancel()
	if err := m.cfg.Network.Detach(ctx, b.rec.ID); err != nil {
		m.log.Warn("detaching the network failed", "sandbox", b.rec.ID, "err", err)
	}
}

// checkNetwork refuses network rules this manager cannot honour.
func (m *Manager) checkNetwork(r egress.Rules) error {
	if m.cfg.Network != nil {
		return nil
	}
	if r.Mode == egress.ModeOpen || len(r.AllowHosts) > 0 || len(r.AllowCIDRs) > 0 || len(r.Secrets) > 0 {
		return fmt.Errorf("this service runs sandboxes without a network boundary, so they have no network: %w", errdefs.ErrFailedPrecondition)
	}
	return nil
}

// SetNetwork replaces a running sandbox's network rules (normalized by the
// caller) without restarting it; connections the new rules deny are
// closed. Secrets are bound at create (their placeholders are in the
// sandbox's environment): the new rules may drop a secret or change its
// hosts, not add one; and a sandbox made with --network none has no
// interface to give traffic to, so it stays none.
func (m *Manager) SetNetwork(ctx context.Context, tenant, id string, rules egress.Rules) (sandbox.Info, error) {
	b, err := m.lookup(tenant, id)
	if err != nil {
		return sandbox.Info{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rec.State != sandbox.StateRunning && b.rec.State != sandbox.StateSuspended {
		return sandbox.Info{}, fmt.Errorf("sandbox %s is %s%s: its network cannot change: %w", id, b.rec.State, stoppedWhy(b.rec), errdefs.ErrFailedPrecondition)
	}
	if err := m.checkNetwork(rules); err != nil {
		return sandbox.Info{}, err
	}
	old := b.rec.Spec.Network
	if old.Mode == egress.ModeNone && rules.Mode != egress.ModeNone {
		return sandbox.Info{}, fmt.Errorf("sandbox %s was made with --network none and has no network interface: make a new sandbox with --network egress (with no --allow-host nothing leaves it) to change its rules later: %w", id, errdefs.ErrFailedPrecondition)
	}
	for _, s := range rules.Secrets {
		if !slices.ContainsFunc(old.Secrets, func(o egress.SecretRef) bool { return o.Name == s.Name }) {
			return sandbox.Info{}, fmt.Errorf("secret %s was not given when sandbox %s was made: secrets are bound at create, where their placeholders enter the sandbox's environment: %w", s.Name, id, errdefs.ErrFailedPrecondition)
		}
	}
	prev := b.rec.Spec.Network
	b.rec.Spec.Network = rules
	if b.rec.State == sandbox.StateRunning && m.cfg.Network != nil {
		if err := m.cfg.Network.Update(ctx, m.networkRequest(b)); err != nil {
			b.rec.Spec.Network = prev
			return sandbox.Info{}, fmt.Errorf("changing sandbox %s's network: %w", id, err)
		}
	}
	if err := writeRecord(b.dir, &b.rec); err != nil {
		return sandbox.Info{}, err
	}
	m.log.Info("network rules changed", "sandbox", id, "mode", rules.Mode, "allow_hosts", len(rules.AllowHosts))
	return b.rec.Info, nil
}
