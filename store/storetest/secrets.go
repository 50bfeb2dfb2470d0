package storetest

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/store"
)

// RunSecrets runs the suite of store.Secrets. newSecrets must return a new,
// empty store each call and arrange for its Close with t.Cleanup.
func RunSecrets(t *testing.T, newSecrets func(t *testing.T) store.Secrets) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Secrets)
	}{
		{"PutGet", testSecretPutGet},
		{"Replace", testSecretReplace},
		{"List", testSecretList},
		{"Delete", testSecretDelete},
		{"Scopes", testSecretScopes},
		{"Invalid", testSecretInvalid},
		{"Binary", testSecretBinary},
		{"Concurrent", testSecretConcurrent},
	}
	for _, tt := range tests {
		t.Run("Secret"+tt.name, func(t *testing.T) {
			tt.fn(t, newSecrets(t))
		})
	}
}

func putSecret(t *testing.T, s store.Secrets, tenant, name string, sealed []byte, now time.Time) bool {
	t.Helper()
	created, err := s.PutSecret(context.Background(), tenant, name, sealed, now)
	if err != nil {
		t.Fatalf("PutSecret(%q, %q): %v", tenant, name, err)
	}
	return created
}

func getSecret(t *testing.T, s store.Secrets, tenant, name string) []byte {
	t.Helper()
	got, err := s.GetSecret(context.Background(), tenant, name)
	if err != nil {
		t.Fatalf("GetSecret(%q, %q): %v", tenant, name, err)
	}
	return got
}

func testSecretPutGet(t *testing.T, s store.Secrets) {
	if !putSecret(t, s, "acme", "TOKEN", []byte("sealed-1"), ts(0)) {
		t.Error("PutSecret of a new secret reported created = false")
	}
	if got := getSecret(t, s, "acme", "TOKEN"); string(got) != "sealed-1" {
		t.Errorf("GetSecret = %q, want sealed-1", got)
	}
	list, err := s.ListSecrets(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	want := store.SecretMeta{Name: "TOKEN", CreatedAt: ts(0), UpdatedAt: ts(0), Size: len("sealed-1")}
	if len(list) != 1 || list[0] != want || list[0].CreatedAt.Location() != time.UTC {
		t.Errorf("ListSecrets = %+v, want [%+v] in UTC", list, want)
	}
	// The store keeps what it was given, not the caller's slice.
	buf := []byte("sealed-2")
	putSecret(t, s, "acme", "OTHER", buf, ts(1))
	buf[0] = 'X'
	if got := getSecret(t, s, "acme", "OTHER"); string(got) != "sealed-2" {
		t.Errorf("GetSecret after the caller changed its slice = %q, want sealed-2", got)
	}
}

func testSecretReplace(t *testing.T, s store.Secrets) {
	putSecret(t, s, "acme", "TOKEN", []byte("old"), ts(0))
	if putSecret(t, s, "acme", "TOKEN", []byte("newer value"), ts(60)) {
		t.Error("PutSecret over an existing secret reported created = true")
	}
	if got := getSecret(t, s, "acme", "TOKEN"); string(got) != "newer value" {
		t.Errorf("GetSecret after replace = %q, want the new value", got)
	}
	list, _ := s.ListSecrets(context.Background(), "acme")
	want := store.SecretMeta{Name: "TOKEN", CreatedAt: ts(0), UpdatedAt: ts(60), Size: len("newer value")}
	if len(list) != 1 || list[0] != want {
		t.Errorf("ListSecrets after replace = %+v, want [%+v] (created kept, updated now)", list, want)
	}
}

func testSecretList(t *testing.T, s store.Secrets) {
	ctx := context.Background()
	if list, err := s.ListSecrets(ctx, "acme"); err != nil || len(list) != 0 {
		t.Errorf("ListSecrets of an empty store = %v, %v", list, err)
	}
	for i, n := range []string{"b", "_x", "B", "a_1", "A"} {
		putSecret(t, s, "acme", n, []byte{byte(i + 1)}, ts(i))
	}
	list, err := s.ListSecrets(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range list {
		names = append(names, m.Name)
	}
	if got := strings.Join(names, ","); got != "A,B,_x,a_1,b" {
		t.Errorf("ListSecrets order = %s, want A,B,_x,a_1,b (bytewise)", got)
	}
}

func testSecretDelete(t *testing.T, s store.Secrets) {
	ctx := context.Background()
	putSecret(t, s, "acme", "TOKEN", []byte("v"), ts(0))
	putSecret(t, s, "acme", "KEEP", []byte("k"), ts(0))
	if err := s.DeleteSecret(ctx, "acme", "TOKEN"); err != nil {
		t.Fatal(err)
	}
	_, err := s.GetSecret(ctx, "acme", "TOKEN")
	wantKind(t, "GetSecret of a deleted secret", err, errdefs.ErrNotFound)
	wantKind(t, "DeleteSecret twice", s.DeleteSecret(ctx, "acme", "TOKEN"), errdefs.ErrNotFound)
	wantKind(t, "DeleteSecret of one never set", s.DeleteSecret(ctx, "acme", "NOPE"), errdefs.ErrNotFound)
	if got := getSecret(t, s, "acme", "KEEP"); string(got) != "k" {
		t.Errorf("deleting TOKEN changed KEEP: %q", got)
	}
	// A deleted secret set again is new.
	if !putSecret(t, s, "acme", "TOKEN", []byte("again"), ts(5)) {
		t.Error("PutSecret after DeleteSecret reported created = false")
	}
}

// testSecretScopes: the same name in three scopes (the admin's "" among
// them) is three secrets; none is reached, listed, replaced or deleted
// from another scope, and "" is no wildcard.
func testSecretScopes(t *testing.T, s store.Secrets) {
	ctx := context.Background()
	scopes := []string{"", "acme", "beta"}
	for i, sc := range scopes {
		putSecret(t, s, sc, "TOKEN", []byte("of-"+sc), ts(i))
	}
	putSecret(t, s, "acme", "ONLY_ACME", []byte("a"), ts(0))
	for _, sc := range scopes {
		if got := getSecret(t, s, sc, "TOKEN"); string(got) != "of-"+sc {
			t.Errorf("GetSecret(%q, TOKEN) = %q, want of-%s", sc, got, sc)
		}
	}
	for _, sc := range []string{"", "beta", "other"} {
		_, err := s.GetSecret(ctx, sc, "ONLY_ACME")
		wantKind(t, fmt.Sprintf("GetSecret(%q) of acme's secret", sc), err, errdefs.ErrNotFound)
		wantKind(t, fmt.Sprintf("DeleteSecret(%q) of acme's secret", sc), s.DeleteSecret(ctx, sc, "ONLY_ACME"), errdefs.ErrNotFound)
	}
	if list, _ := s.ListSecrets(ctx, ""); len(list) != 1 || list[0].Name != "TOKEN" {
		t.Errorf("ListSecrets(\"\") = %+v, want the admin's own TOKEN only", list)
	}
	if list, _ := s.ListSecrets(ctx, "other"); len(list) != 0 {
		t.Errorf("ListSecrets of a scope with none = %+v", list)
	}
	if err := s.DeleteSecret(ctx, "", "TOKEN"); err != nil {
		t.Fatal(err)
	}
	for _, sc := range []string{"acme", "beta"} {
		if got := getSecret(t, s, sc, "TOKEN"); string(got) != "of-"+sc {
			t.Errorf("deleting the admin's TOKEN changed %s's: %q", sc, got)
		}
	}
	if got := getSecret(t, s, "acme", "ONLY_ACME"); string(got) != "a" {
		t.Errorf("acme's secret after others' attempts: %q", got)
	}
}

func testSecretInvalid(t *testing.T, s store.Secrets) {
	ctx := context.Background()
	bad := []struct {
		what, tenant, name string
		sealed             []byte
	}{
		{"empty name", "acme", "", []byte("x")},
		{"NUL in name", "acme", "A\x00B", []byte("x")},
		{"long name", "acme", strings.Repeat("A", store.MaxSecretName+1), []byte("x")},
		{"bad tenant", "Acme/x", "A", []byte("x")},
		{"empty value", "acme", "A", nil},
		{"huge value", "acme", "A", make([]byte, store.MaxSealedSecret+1)},
	}
	for _, b := range bad {
		_, err := s.PutSecret(ctx, b.tenant, b.name, b.sealed, ts(0))
		wantKind(t, "PutSecret with "+b.what, err, errdefs.ErrInvalidArgument)
	}
	_, err := s.GetSecret(ctx, "acme", "")
	wantKind(t, "GetSecret with an empty name", err, errdefs.ErrInvalidArgument)
	wantKind(t, "DeleteSecret with an empty name", s.DeleteSecret(ctx, "acme", ""), errdefs.ErrInvalidArgument)
	if list, _ := s.ListSecrets(ctx, "acme"); len(list) != 0 {
		t.Errorf("refused puts stored something: %+v", list)
	}
	// The limits themselves are fine.
	putSecret(t, s, "acme", strings.Repeat("A", store.MaxSecretName), make([]byte, store.MaxSealedSecret), ts(0))
}

// testSecretBinary: sealed values are bytes, NULs and all.
func testSecretBinary(t *testing.T, s store.Secrets) {
	v := make([]byte, 1024)
	for i := range v {
		v[i] = byte(i)
	}
	putSecret(t, s, "", "BIN", v, ts(0))
	if got := getSecret(t, s, "", "BIN"); !bytes.Equal(got, v) {
		t.Errorf("GetSecret of 1 KiB of every byte value came back changed (%d bytes)", len(got))
	}
}

// testSecretConcurrent: many writers of one name; exactly one creates it.
func testSecretConcurrent(t *testing.T, s store.Secrets) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	creates := 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			created, err := s.PutSecret(context.Background(), "acme", "RACE", []byte{byte(i + 1)}, ts(i))
			if err != nil {
				t.Error(err)
				return
			}
			if created {
				mu.Lock()
				creates++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if creates != 1 {
		t.Errorf("%d of 8 concurrent PutSecrets of one new name reported created, want 1", creates)
	}
}
