package server

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/api/reins/v1/reinsv1connect"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/store"
)

var _ reinsv1connect.TenantServiceHandler = (*Tenants)(nil)

// adminOnly refuses a tenant's token.
func adminOnly(ctx context.Context) error {
	if t := tenant(ctx); t != "" {
		return fmt.Errorf("managing tenants needs the admin token (the data dir's admin.token); this token is tenant %s's: %w",
			t, errdefs.ErrPermissionDenied)
	}
	return nil
}

func (t *Tenants) Create(ctx context.Context, req *connect.Request[reinsv1.CreateTenantRequest]) (*connect.Response[reinsv1.CreateTenantResponse], error) {
	if err := adminOnly(ctx); err != nil {
		return nil, err
	}
	if err := t.Store.CreateTenant(ctx, store.Tenant{Name: req.Msg.Name, Quota: QuotaFromProto(req.Msg.Quota)}); err != nil {
		return nil, err
	}
	tn, err := t.Store.GetTenant(ctx, req.Msg.Name)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.CreateTenantResponse{Tenant: t.toProto(tn)}), nil
}

func (t *Tenants) List(ctx context.Context, req *connect.Request[reinsv1.ListTenantsRequest]) (*connect.Response[reinsv1.ListTenantsResponse], error) {
	if err := adminOnly(ctx); err != nil {
		return nil, err
	}
	list, err := t.Store.ListTenants(ctx)
	if err != nil {
		return nil, err
	}
	resp := &reinsv1.ListTenantsResponse{}
	for _, tn := range list {
		resp.Tenants = append(resp.Tenants, t.toProto(tn))
	}
	return connect.NewResponse(resp), nil
}

func (t *Tenants) Token(ctx context.Context, req *connect.Request[reinsv1.TenantTokenRequest]) (*connect.Response[reinsv1.TenantTokenResponse], error) {
	if err := adminOnly(ctx); err != nil {
		return nil, err
	}
	tok := NewToken()
	tn, err := t.Store.SetTenantToken(ctx, req.Msg.Name, HashToken(tok))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.TenantTokenResponse{Tenant: t.toProto(tn), Token: tok}), nil
}

func (t *Tenants) SetQuota(ctx context.Context, req *connect.Request[reinsv1.SetTenantQuotaRequest]) (*connect.Response[reinsv1.SetTenantQuotaResponse], error) {
	if err := adminOnly(ctx); err != nil {
		return nil, err
	}
	if err := t.Store.SetTenantQuota(ctx, req.Msg.Name, QuotaFromProto(req.Msg.Quota)); err != nil {
		return nil, err
	}
	tn, err := t.Store.GetTenant(ctx, req.Msg.Name)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.SetTenantQuotaResponse{Tenant: t.toProto(tn)}), nil
}

func (t *Tenants) SetPolicy(ctx context.Context, req *connect.Request[reinsv1.SetTenantPolicyRequest]) (*connect.Response[reinsv1.SetTenantPolicyResponse], error) {
	if err := adminOnly(ctx); err != nil {
		return nil, err
	}
	if req.Msg.Policy != "" && t.CheckPolicy != nil {
		if err := t.CheckPolicy(req.Msg.Policy); err != nil {
			return nil, err
		}
	}
	if err := t.Store.SetTenantPolicy(ctx, req.Msg.Name, req.Msg.Policy); err != nil {
		return nil, err
	}
	tn, err := t.Store.GetTenant(ctx, req.Msg.Name)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.SetTenantPolicyResponse{Tenant: t.toProto(tn)}), nil
}

// QuotaFromProto converts a wire quota; any negative number is no limit (-1).
func QuotaFromProto(p *reinsv1.Quota) store.Quota {
	if p == nil {
		return store.Quota{}
	}
	return store.Quota{Sandboxes: max(int(p.Sandboxes), -1), Runs: max(int(p.Runs), -1)}
}

func (t *Tenants) toProto(tn store.Tenant) *reinsv1.Tenant {
	eff := t.effective(tn.Quota)
	p := &reinsv1.Tenant{
		Name:            tn.Name,
		CreatedUnixNano: tn.CreatedAt.UnixNano(),
		Quota:           &reinsv1.Quota{Sandboxes: int32(tn.Quota.Sandboxes), Runs: int32(tn.Quota.Runs)},
		// 0 on the wire is "the default", so an effective "no limit" is -1.
		EffectiveQuota: &reinsv1.Quota{Sandboxes: noLimit(eff.Sandboxes), Runs: noLimit(eff.Runs)},
		Policy:         tn.Policy,
	}
	if !tn.TokenIssuedAt.IsZero() {
		p.TokenIssuedUnixNano = tn.TokenIssuedAt.UnixNano()
	}
	return p
}

func noLimit(n int) int32 {
	if n <= 0 {
		return -1
	}
	return int32(n)
}
