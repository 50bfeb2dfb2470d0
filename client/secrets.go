package client

import (
	"context"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/api/reins/v1/reinsv1connect"
)

// The secret API works on the caller's own scope (a tenant's token: the
// tenant's secrets; the admin token: the admin's own), and never returns
// a value.

func (c *Client) secrets() reinsv1connect.SecretServiceClient {
	return reinsv1connect.NewSecretServiceClient(c.http, c.URL)
}

// SetSecret stores a secret, replacing any value it had.
func (c *Client) SetSecret(ctx context.Context, name string, value []byte) (*reinsv1.Secret, error) {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	resp, err := c.secrets().Set(ctx, connect.NewRequest(&reinsv1.SetSecretRequest{Name: name, Value: value}))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg.Secret, nil
}

// ListSecrets lists the caller's secrets by name, without values.
func (c *Client) ListSecrets(ctx context.Context) ([]*reinsv1.Secret, error) {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	resp, err := c.secrets().List(ctx, connect.NewRequest(&reinsv1.ListSecretsRequest{}))
	if err != nil {
		return nil, c.wrap(err)
	}
	return resp.Msg.Secrets, nil
}

// DeleteSecret removes one of the caller's secrets.
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	ctx, cancel := unaryDeadline(ctx)
	defer cancel()
	_, err := c.secrets().Delete(ctx, connect.NewRequest(&reinsv1.DeleteSecretRequest{Name: name}))
	return c.wrap(err)
}
