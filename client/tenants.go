package client

import (
	"context"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/api/reins/v1/reinsv1connect"
)

// The tenant API needs the admin token; a tenant's gets
// errdefs.ErrPermissionDenied.

func (c *Client) tenants() reinsv1connect.TenantServiceClient {
	return reinsv1connect.NewTenantServiceClient(c.http, c.URL)
}

// CreateTenant makes a tenant, without a token (see TenantToken). A zero
// quota field is the service's default, -1 no limit.
func (c *Client) CreateTenant(ctx context.Context, name string, quota *reinsv1.Quota) (*reinsv1.Tenant, error) {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	resp, err := c.tenants().Create(ctx, connect.NewRequest(&reinsv1.CreateTenantRequest{Name: name, Quota: quota}))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg.Tenant, nil
}

// ListTenants lists every tenant, by name.
func (c *Client) ListTenants(ctx context.Context) ([]*reinsv1.Tenant, error) {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	resp, err := c.tenants().List(ctx, connect.NewRequest(&reinsv1.ListTenantsRequest{}))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg.Tenants, nil
}

// TenantToken issues a new token for a tenant, revoking its old one. The
// service keeps only a hash: this is the only time the token is seen.
func (c *Client) TenantToken(ctx context.Context, name string) (token string, t *reinsv1.Tenant, err error) {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	resp, err := c.tenants().Token(ctx, connect.NewRequest(&reinsv1.TenantTokenRequest{Name: name}))
	if err != nil {
		return "", nil, c.wrap(err)
	}
	return resp.Msg.Token, resp.Msg.Tenant, nil
}

// SetTenantQuota replaces a tenant's quota.
func (c *Client) SetTenantQuota(ctx context.Context, name string, quota *reinsv1.Quota) (*reinsv1.Tenant, error) {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	resp, err := c.tenants().SetQuota(ctx, connect.NewRequest(&reinsv1.SetTenantQuotaRequest{Name: name, Quota: quota}))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg.Tenant, nil
}

// SetTenantPolicy sets a tenant's default policy ("" clears it).
func (c *Client) SetTenantPolicy(ctx context.Context, name, policy string) (*reinsv1.Tenant, error) {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	resp, err := c.tenants().SetPolicy(ctx, connect.NewRequest(&reinsv1.SetTenantPolicyRequest{Name: name, Policy: policy}))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg.Tenant, nil
}
