package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/store"
)

// TestSecretsOfDeletedTenant: the store has no DeleteTenant yet, but a
// tenant's row deleted (by a later DeleteTenant, or by hand) takes its
// secrets with it, and no other scope's; secrets survive a reopen.
func TestSecretsOfDeletedTenant(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reins.db")
	ctx := context.Background()
	s := open(t, path)
	for _, tn := range []string{"acme", "beta"} {
		if err := s.CreateTenant(ctx, store.Tenant{Name: tn}); err != nil {
			t.Fatal(err)
		}
	}
	for _, sc := range []string{"", "acme", "beta"} {
		if _, err := s.PutSecret(ctx, sc, "TOKEN", []byte("sealed "+sc), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()

	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`DELETE FROM tenants WHERE name = 'acme'`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s = open(t, path)
	defer s.Close()
	if _, err := s.GetSecret(ctx, "acme", "TOKEN"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a deleted tenant's secret: %v, want not found", err)
	}
	for _, sc := range []string{"", "beta"} {
		if got, err := s.GetSecret(ctx, sc, "TOKEN"); err != nil || string(got) != "sealed "+sc {
			t.Errorf("scope %q's secret after acme was deleted and a reopen: %q, %v", sc, got, err)
		}
	}
}
