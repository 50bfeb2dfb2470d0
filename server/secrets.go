package server

import (
	"context"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/api/reins/v1/reinsv1connect"
	"github.com/reinsdev/reins/store"
)

// SecretKeeper is what the secret API needs of secret.Secrets: values go
// in, metadata comes out.
type SecretKeeper interface {
	Set(ctx context.Context, tenant, name string, value []byte) error
	List(ctx context.Context, tenant string) ([]store.SecretMeta, error)
	Delete(ctx context.Context, tenant, name string) error
}

// WithSecrets serves the secret API over k. Each call works on the
// caller's own scope: a tenant's secrets for its token, the admin's own
// for the admin token; no call returns a value.
func (s *Server) WithSecrets(k SecretKeeper) *Server {
	s.secrets = &secretAPI{k: k}
	return s
}

type secretAPI struct{ k SecretKeeper }

var _ reinsv1connect.SecretServiceHandler = (*secretAPI)(nil)

func (a *secretAPI) Set(ctx context.Context, req *connect.Request[reinsv1.SetSecretRequest]) (*connect.Response[reinsv1.SetSecretResponse], error) {
	scope := tenant(ctx)
	if err := a.k.Set(ctx, scope, req.Msg.Name, req.Msg.Value); err != nil {
		return nil, err
	}
	resp := &reinsv1.SetSecretResponse{}
	list, err := a.k.List(ctx, scope)
	if err != nil {
		return nil, err
	}
	for _, m := range list {
		if m.Name == req.Msg.Name {
			resp.Secret = SecretToProto(m)
		}
	}
	return connect.NewResponse(resp), nil
}

func (a *secretAPI) List(ctx context.Context, req *connect.Request[reinsv1.ListSecretsRequest]) (*connect.Response[reinsv1.ListSecretsResponse], error) {
	list, err := a.k.List(ctx, tenant(ctx))
	if err != nil {
		return nil, err
	}
	resp := &reinsv1.ListSecretsResponse{}
	for _, m := range list {
		resp.Secrets = append(resp.Secrets, SecretToProto(m))
	}
	return connect.NewResponse(resp), nil
}

func (a *secretAPI) Delete(ctx context.Context, req *connect.Request[reinsv1.DeleteSecretRequest]) (*connect.Response[reinsv1.DeleteSecretResponse], error) {
	if err := a.k.Delete(ctx, tenant(ctx), req.Msg.Name); err != nil {
		return nil, err
	}
	return connect.NewResponse(&reinsv1.DeleteSecretResponse{}), nil
}

// SecretToProto converts a secret's metadata for the wire.
func SecretToProto(m store.SecretMeta) *reinsv1.Secret {
	return &reinsv1.Secret{
		Name:            m.Name,
		Size:            int64(m.Size),
		CreatedUnixNano: m.CreatedAt.UnixNano(),
		UpdatedUnixNano: m.UpdatedAt.UnixNano(),
	}
}
