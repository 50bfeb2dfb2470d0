package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/store"
)

var _ store.Secrets = (*Store)(nil)

// PutSecret inserts or replaces a sealed secret.
func (s *Store) PutSecret(ctx context.Context, tenant, name string, sealed []byte, now time.Time) (bool, error) {
	if err := checkSealed(tenant, name, sealed); err != nil {
		return false, err
	}
	var created bool
	err := s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM secrets WHERE tenant = ? AND name = ?`, tenant, name).Scan(&one)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			created = true
		case err != nil:
			return s.dbErr(fmt.Errorf("put secret %s: %w", name, err))
		default:
			created = false
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO secrets (tenant, name, sealed, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (tenant, name) DO UPDATE SET sealed = excluded.sealed, updated_at = excluded.updated_at`,
			tenant, name, sealed, nanos(now), nanos(now))
		if err != nil {
			return s.dbErr(fmt.Errorf("put secret %s: %w", name, err))
		}
		return nil
	})
	return created, err
}

// GetSecret returns a secret's sealed value.
func (s *Store) GetSecret(ctx context.Context, tenant, name string) ([]byte, error) {
	if err := store.CheckSecretKey(tenant, name); err != nil {
		return nil, err
	}
	var sealed []byte
	err := s.r.QueryRowContext(ctx, `SELECT sealed FROM secrets WHERE tenant = ? AND name = ?`, tenant, name).Scan(&sealed)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, secretNotFound(name)
	}
	if err != nil {
		return nil, s.dbErr(fmt.Errorf("get secret %s: %w", name, err))
	}
	return sealed, nil
}

// ListSecrets returns the scope's secrets by name.
func (s *Store) ListSecrets(ctx context.Context, tenant string) ([]store.SecretMeta, error) {
	if tenant != "" {
		if err := store.CheckTenantName(tenant); err != nil {
			return nil, err
		}
	}
	rows, err := s.r.QueryContext(ctx, `SELECT name, created_at, updated_at, length(sealed)
		FROM secrets WHERE tenant = ? ORDER BY name`, tenant)
	if err != nil {
		return nil, s.dbErr(fmt.Errorf("list secrets: %w", err))
	}
	defer rows.Close()
	var out []store.SecretMeta
	for rows.Next() {
		var m store.SecretMeta
		var created, updated int64
		if err := rows.Scan(&m.Name, &created, &updated, &m.Size); err != nil {
			return nil, s.dbErr(fmt.Errorf("list secrets: %w", err))
		}
		m.CreatedAt, m.UpdatedAt = fromNanos(created), fromNanos(updated)
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, s.dbErr(fmt.Errorf("list secrets: %w", err))
	}
	return out, nil
}

// DeleteSecret removes a secret.
func (s *Store) DeleteSecret(ctx context.Context, tenant, name string) error {
	if err := store.CheckSecretKey(tenant, name); err != nil {
		return err
	}
	return s.writeTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM secrets WHERE tenant = ? AND name = ?`, tenant, name)
		if err != nil {
			return s.dbErr(fmt.Errorf("delete secret %s: %w", name, err))
		}
		if n, err := res.RowsAffected(); err != nil {
			return s.dbErr(fmt.Errorf("delete secret %s: %w", name, err))
		} else if n == 0 {
			return secretNotFound(name)
		}
		return nil
	})
}

func checkSealed(tenant, name string, sealed []byte) error {
	if err := store.CheckSecretKey(tenant, name); err != nil {
		return err
	}
	if len(sealed) == 0 || len(sealed) > store.MaxSealedSecret {
		return fmt.Errorf("secret %s: a sealed value of %d bytes: want 1 to %d: %w", name, len(sealed), store.MaxSealedSecret, errdefs.ErrInvalidArgument)
	}
	return nil
}

func secretNotFound(name string) error {
	return fmt.Errorf("secret %s not found: %w", name, errdefs.ErrNotFound)
}
