package storetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/store"
)

// RunTenants runs the suite of store.Tenants. newTenants must return a new,
// empty store each call and arrange for its Close with t.Cleanup.
func RunTenants(t *testing.T, newTenants func(t *testing.T) store.Tenants) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Tenants)
	}{
		{"CreateGet", testTenantCreateGet},
		{"Names", testTenantNames},
		{"Duplicate", testTenantDuplicate},
		{"Unknown", testTenantUnknown},
		{"List", testTenantList},
		{"Quota", testTenantQuota},
		{"Token", testTenantToken},
		{"TokenConcurrent", testTenantTokenConcurrent},
	}
	for _, tt := range tests {
		t.Run("Tenant"+tt.name, func(t *testing.T) {
			tt.fn(t, newTenants(t))
		})
	}
}

func createTenant(t *testing.T, s store.Tenants, tn store.Tenant) {
	t.Helper()
	if err := s.CreateTenant(context.Background(), tn); err != nil {
		t.Fatalf("CreateTenant(%s): %v", tn.Name, err)
	}
}

func testTenantCreateGet(t *testing.T, s store.Tenants) {
	ctx := context.Background()
	want := store.Tenant{Name: "acme", CreatedAt: ts(0), Quota: store.Quota{Sandboxes: 3, Runs: -1}}
	createTenant(t, s, want)
	got, err := s.GetTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != want.Name || !got.CreatedAt.Equal(want.CreatedAt) || got.CreatedAt.Location() != time.UTC ||
		got.Quota != want.Quota || !got.TokenIssuedAt.IsZero() {
		t.Errorf("GetTenant = %+v, want %+v (in UTC, no token)", got, want)
	}

	before := time.Now().Add(-time.Second)
	createTenant(t, s, store.Tenant{Name: "beta"})
	got, err = s.GetTenant(ctx, "beta")
	if err != nil {
		t.Fatal(err)
	}
	if got.CreatedAt.Before(before) || got.CreatedAt.After(time.Now().Add(time.Second)) {
		t.Errorf("a zero CreatedAt became %v, want now", got.CreatedAt)
	}
	if got.Quota != (store.Quota{}) {
		t.Errorf("default quota %+v, want zeros (the service's defaults)", got.Quota)
	}
}

func testTenantNames(t *testing.T, s store.Tenants) {
	for _, ok := range []string{"a", "acme", "team-7", "0", strings.Repeat("x", 40)} {
		if err := s.CreateTenant(context.Background(), store.Tenant{Name: ok}); err != nil {
			t.Errorf("CreateTenant(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "Acme", "a_b", "a b", "a.b", "é", "a/b", strings.Repeat("x", 41)} {
		err := s.CreateTenant(context.Background(), store.Tenant{Name: bad})
		wantKind(t, fmt.Sprintf("CreateTenant(%q)", bad), err, errdefs.ErrInvalidArgument)
	}
}

func testTenantDuplicate(t *testing.T, s store.Tenants) {
	createTenant(t, s, store.Tenant{Name: "acme", Quota: store.Quota{Sandboxes: 1}})
	err := s.CreateTenant(context.Background(), store.Tenant{Name: "acme", Quota: store.Quota{Sandboxes: 9}})
	wantKind(t, "CreateTenant of a taken name", err, errdefs.ErrAlreadyExists)
	if err != nil && !strings.Contains(err.Error(), "acme") {
		t.Errorf("duplicate error %q does not name the tenant", err)
	}
	got, _ := s.GetTenant(context.Background(), "acme")
	if got.Quota.Sandboxes != 1 {
		t.Errorf("a refused duplicate changed the tenant: %+v", got)
	}
}

func testTenantUnknown(t *testing.T, s store.Tenants) {
	ctx := context.Background()
	_, err := s.GetTenant(ctx, "nope")
	wantKind(t, "GetTenant(nope)", err, errdefs.ErrNotFound)
	wantKind(t, "SetTenantQuota(nope)", s.SetTenantQuota(ctx, "nope", store.Quota{Runs: 1}), errdefs.ErrNotFound)
	_, err = s.SetTenantToken(ctx, "nope", "h1")
	wantKind(t, "SetTenantToken(nope)", err, errdefs.ErrNotFound)
	_, err = s.TenantByToken(ctx, "h1")
	wantKind(t, "TenantByToken of an unknown hash", err, errdefs.ErrNotFound)
	_, err = s.TenantByToken(ctx, "")
	wantKind(t, "TenantByToken(\"\")", err, errdefs.ErrNotFound)
	list, err := s.ListTenants(ctx)
	if err != nil || len(list) != 0 {
		t.Errorf("ListTenants of an empty store: %v, %v", list, err)
	}
}

func testTenantList(t *testing.T, s store.Tenants) {
	for _, n := range []string{"zeta", "acme", "m-1"} {
		createTenant(t, s, store.Tenant{Name: n})
	}
	list, err := s.ListTenants(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tn := range list {
		names = append(names, tn.Name)
	}
	if strings.Join(names, ",") != "acme,m-1,zeta" {
		t.Errorf("ListTenants = %v, want acme, m-1, zeta", names)
	}
}

func testTenantQuota(t *testing.T, s store.Tenants) {
	ctx := context.Background()
	createTenant(t, s, store.Tenant{Name: "acme"})
	createTenant(t, s, store.Tenant{Name: "beta"})
	q := store.Quota{Sandboxes: 2, Runs: -1}
	if err := s.SetTenantQuota(ctx, "acme", q); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetTenant(ctx, "acme"); got.Quota != q {
		t.Errorf("quota after SetTenantQuota: %+v, want %+v", got.Quota, q)
	}
	if got, _ := s.GetTenant(ctx, "beta"); got.Quota != (store.Quota{}) {
		t.Errorf("SetTenantQuota(acme) changed beta: %+v", got.Quota)
	}
	// The default policy is stored whole and per tenant.
	pol := "tools:\n  bash: ask\n"
	if err := s.SetTenantPolicy(ctx, "acme", pol); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetTenant(ctx, "acme"); got.Policy != pol {
		t.Errorf("policy after SetTenantPolicy: %q", got.Policy)
	}
	if got, _ := s.GetTenant(ctx, "beta"); got.Policy != "" {
		t.Errorf("SetTenantPolicy(acme) changed beta: %q", got.Policy)
	}
	wantKind(t, "SetTenantPolicy(nope)", s.SetTenantPolicy(ctx, "nope", pol), errdefs.ErrNotFound)
}

func testTenantToken(t *testing.T, s store.Tenants) {
	ctx := context.Background()
	createTenant(t, s, store.Tenant{Name: "acme"})
	createTenant(t, s, store.Tenant{Name: "beta"})
	before := time.Now().Add(-time.Second)
	tn, err := s.SetTenantToken(ctx, "acme", "h1")
	if err != nil {
		t.Fatal(err)
	}
	if tn.Name != "acme" || tn.TokenIssuedAt.Before(before) {
		t.Errorf("SetTenantToken returned %+v, want acme with its token's time", tn)
	}
	if _, err := s.SetTenantToken(ctx, "beta", "h2"); err != nil {
		t.Fatal(err)
	}
	for hash, want := range map[string]string{"h1": "acme", "h2": "beta"} {
		got, err := s.TenantByToken(ctx, hash)
		if err != nil || got.Name != want {
			t.Errorf("TenantByToken(%s) = %q, %v; want %s", hash, got.Name, err, want)
		}
	}
	// A new token revokes the old one.
	if _, err := s.SetTenantToken(ctx, "acme", "h3"); err != nil {
		t.Fatal(err)
	}
	_, err = s.TenantByToken(ctx, "h1")
	wantKind(t, "TenantByToken of a replaced token", err, errdefs.ErrNotFound)
	if got, err := s.TenantByToken(ctx, "h3"); err != nil || got.Name != "acme" {
		t.Errorf("TenantByToken(h3) = %q, %v; want acme", got.Name, err)
	}
	// Another tenant's hash is never taken over.
	_, err = s.SetTenantToken(ctx, "acme", "h2")
	wantKind(t, "SetTenantToken with beta's hash", err, errdefs.ErrAlreadyExists)
	if got, err := s.TenantByToken(ctx, "h2"); err != nil || got.Name != "beta" {
		t.Errorf("after a refused SetTenantToken, h2 is %q, %v; want beta", got.Name, err)
	}
	if got, err := s.TenantByToken(ctx, "h3"); err != nil || got.Name != "acme" {
		t.Errorf("a refused SetTenantToken revoked acme's token: %q, %v", got.Name, err)
	}
	_, err = s.SetTenantToken(ctx, "acme", "")
	wantKind(t, "SetTenantToken with an empty hash", err, errdefs.ErrInvalidArgument)
}

// testTenantTokenConcurrent: of racing SetTenantToken calls, exactly one
// token is left, and it is one of them.
func testTenantTokenConcurrent(t *testing.T, s store.Tenants) {
	ctx := context.Background()
	createTenant(t, s, store.Tenant{Name: "acme"})
	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := s.SetTenantToken(ctx, "acme", fmt.Sprint("h", i)); err != nil {
				t.Errorf("SetTenantToken: %v", err)
			}
		})
	}
	wg.Wait()
	live := 0
	for i := range n {
		if _, err := s.TenantByToken(ctx, fmt.Sprint("h", i)); err == nil {
			live++
		}
	}
	if live != 1 {
		t.Errorf("%d tokens work after concurrent SetTenantToken, want 1", live)
	}
}
