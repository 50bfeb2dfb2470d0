package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/store"
)

var _ store.Tenants = (*Store)(nil)

const tenantQuery = `SELECT t.name, t.created_at, t.max_sandboxes, t.max_runs, t.policy,
	(SELECT max(k.created_at) FROM tenant_tokens k WHERE k.tenant = t.name)
	FROM tenants t`

// CreateTenant stores a new tenant, without a token.
func (s *Store) CreateTenant(ctx context.Context, t store.Tenant) error {
	if err := store.CheckTenantName(t.Name); err != nil {
		return err
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = now()
	}
	return s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO tenants (name, created_at, max_sandboxes, max_runs)
			VALUES (?, ?, ?, ?) ON CONFLICT (name) DO NOTHING`,
			t.Name, nanos(t.CreatedAt), t.Quota.Sandboxes, t.Quota.Runs)
		if err != nil {
			return s.dbErr(fmt.Errorf("create tenant %s: %w", t.Name, err))
		}
		if n, err := res.RowsAffected(); err != nil {
			return s.dbErr(fmt.Errorf("create tenant %s: %w", t.Name, err))
		} else if n == 0 {
			return fmt.Errorf("tenant %s: %w", t.Name, errdefs.ErrAlreadyExists)
		}
		return nil
	})
}

// GetTenant returns tenant name.
func (s *Store) GetTenant(ctx context.Context, name string) (store.Tenant, error) {
	t, err := scanTenant(s.r.QueryRowContext(ctx, tenantQuery+` WHERE t.name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Tenant{}, tenantNotFound(name)
	}
	if err != nil {
		return store.Tenant{}, s.dbErr(fmt.Errorf("get tenant %s: %w", name, err))
	}
	return t, nil
}

// ListTenants returns every tenant, by name.
func (s *Store) ListTenants(ctx context.Context) ([]store.Tenant, error) {
	rows, err := s.r.QueryContext(ctx, tenantQuery+` ORDER BY t.name`)
	if err != nil {
		return nil, s.dbErr(fmt.Errorf("list tenants: %w", err))
	}
	defer rows.Close()
	var out []store.Tenant
	for rows.Next() {
		t, err := scanTenant(rows)
		if err != nil {
			return nil, s.dbErr(fmt.Errorf("list tenants: %w", err))
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, s.dbErr(fmt.Errorf("list tenants: %w", err))
	}
	return out, nil
}

// SetTenantQuota replaces a tenant's quota.
func (s *Store) SetTenantQuota(ctx context.Context, name string, q store.Quota) error {
	return s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE tenants SET max_sandboxes = ?, max_runs = ? WHERE name = ?`,
			q.Sandboxes, q.Runs, name)
		if err != nil {
			return s.dbErr(fmt.Errorf("set quota of tenant %s: %w", name, err))
		}
		if n, err := res.RowsAffected(); err != nil {
			return s.dbErr(fmt.Errorf("set quota of tenant %s: %w", name, err))
		} else if n == 0 {
			return tenantNotFound(name)
		}
		return nil
	})
}

// SetTenantPolicy sets a tenant's default policy ("" for none).
func (s *Store) SetTenantPolicy(ctx context.Context, name, policy string) error {
	return s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE tenants SET policy = ? WHERE name = ?`, policy, name)
		if err != nil {
			return s.dbErr(fmt.Errorf("set policy of tenant %s: %w", name, err))
		}
		if n, err := res.RowsAffected(); err != nil {
			return s.dbErr(fmt.Errorf("set policy of tenant %s: %w", name, err))
		} else if n == 0 {
			return tenantNotFound(name)
		}
		return nil
	})
}

// SetTenantToken makes hash the tenant's only token, revoking any other in
// the same transaction.
func (s *Store) SetTenantToken(ctx context.Context, name, hash string) (store.Tenant, error) {
	if hash == "" {
		return store.Tenant{}, fmt.Errorf("token of tenant %s: empty hash: %w", name, errdefs.ErrInvalidArgument)
	}
	t := now()
	err := s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM tenants WHERE name = ?`, name).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return tenantNotFound(name)
		}
		if err != nil {
			return s.dbErr(fmt.Errorf("token of tenant %s: %w", name, err))
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM tenant_tokens WHERE tenant = ?`, name); err != nil {
			return s.dbErr(fmt.Errorf("token of tenant %s: %w", name, err))
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO tenant_tokens (hash, tenant, created_at) VALUES (?, ?, ?)
			ON CONFLICT (hash) DO NOTHING`, hash, name, nanos(t))
		if err != nil {
			return s.dbErr(fmt.Errorf("token of tenant %s: %w", name, err))
		}
		if n, err := res.RowsAffected(); err != nil {
			return s.dbErr(fmt.Errorf("token of tenant %s: %w", name, err))
		} else if n == 0 {
			return fmt.Errorf("token of tenant %s: that hash is taken: %w", name, errdefs.ErrAlreadyExists)
		}
		return nil
	})
	if err != nil {
		return store.Tenant{}, err
	}
	return s.GetTenant(ctx, name)
}

// TenantByToken returns the tenant whose token hashes to hash.
func (s *Store) TenantByToken(ctx context.Context, hash string) (store.Tenant, error) {
	tn, err := scanTenant(s.r.QueryRowContext(ctx,
		tenantQuery+` WHERE t.name = (SELECT tenant FROM tenant_tokens WHERE hash = ?)`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Tenant{}, fmt.Errorf("no tenant has this token: %w", errdefs.ErrNotFound)
	}
	if err != nil {
		return store.Tenant{}, s.dbErr(fmt.Errorf("find tenant by token: %w", err))
	}
	return tn, nil
}

func scanTenant(row interface{ Scan(...any) error }) (store.Tenant, error) {
	var (
		t       store.Tenant
		created int64
		token   sql.NullInt64
	)
	if err := row.Scan(&t.Name, &created, &t.Quota.Sandboxes, &t.Quota.Runs, &t.Policy, &token); err != nil {
		return store.Tenant{}, err
	}
	t.CreatedAt = fromNanos(created)
	if token.Valid {
		t.TokenIssuedAt = fromNanos(token.Int64)
	}
	return t, nil
}

func tenantNotFound(name string) error {
	return fmt.Errorf("tenant %s not found: %w", name, errdefs.ErrNotFound)
}
