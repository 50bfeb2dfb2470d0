package secret

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/store/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// value is what no output may show.
const value = "sk-live-7f3a9c1e-TOPSECRET-value"

type fixture struct {
	dir string
	st  *sqlite.Store
	s   *Secrets
	key Key
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "reins.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	key, err := LoadKey(filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(st, key)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{dir: dir, st: st, s: s, key: key}
}

func TestSetGetListDelete(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	before := time.Now().Add(-time.Second)
	if err := f.s.Set(ctx, "acme", "API_TOKEN", []byte(value)); err != nil {
		t.Fatal(err)
	}
	got, err := f.s.Get(ctx, "acme", "API_TOKEN")
	if err != nil || string(got) != value {
		t.Fatalf("Get = %q, %v", got, err)
	}
	if err := f.s.Set(ctx, "acme", "API_TOKEN", []byte("v2")); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.s.Get(ctx, "acme", "API_TOKEN"); string(got) != "v2" {
		t.Errorf("Get after a second Set = %q, want v2", got)
	}
	list, err := f.s.List(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != "API_TOKEN" || list[0].Size != 2 ||
		list[0].CreatedAt.Before(before) || list[0].UpdatedAt.Before(list[0].CreatedAt) {
		t.Errorf("List = %+v, want API_TOKEN of 2 bytes (the value's size), made now", list)
	}
	if err := f.s.Delete(ctx, "acme", "API_TOKEN"); err != nil {
		t.Fatal(err)
	}
	_, err = f.s.Get(ctx, "acme", "API_TOKEN")
	wantNotFound(t, "Get of a deleted secret", err, "API_TOKEN")
	wantNotFound(t, "Delete twice", f.s.Delete(ctx, "acme", "API_TOKEN"), "API_TOKEN")
}

func wantNotFound(t *testing.T, what string, err error, name string) {
	t.Helper()
	want := fmt.Sprintf("secret %s not found: set it with \"reins secret set %s\"", name, name)
	if !errors.Is(err, errdefs.ErrNotFound) || err.Error() != want {
		t.Errorf("%s: %v, want not found saying %q", what, err, want)
	}
}

func TestBadNames(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, bad := range []string{"", "1X", "A-B", strings.Repeat("A", 200), "A\x00B", "A B", "É", "A=B"} {
		err := f.s.Set(ctx, "acme", bad, []byte(value))
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "letters, digits and '_'") {
			t.Errorf("Set(%q): %v, want invalid argument saying what a name is", bad, err)
		}
		if err != nil && (strings.Contains(err.Error(), value) || strings.ContainsRune(err.Error(), 0) || len(err.Error()) > 200) {
			t.Errorf("Set(%q): the error %q shows the value, a raw NUL or the whole long name", bad, err)
		}
		_, err = f.s.Get(ctx, "acme", bad)
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Get(%q): %v, want invalid argument", bad, err)
		}
		if err := f.s.Delete(ctx, "acme", bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Delete(%q): %v, want invalid argument", bad, err)
		}
	}
	for _, ok := range []string{"A", "_", "a1", "GITHUB_TOKEN", strings.Repeat("A", 128)} {
		if err := f.s.Set(ctx, "acme", ok, []byte("v")); err != nil {
			t.Errorf("Set(%q): %v", ok, err)
		}
	}
	if list, _ := f.s.List(ctx, "acme"); len(list) != 5 {
		t.Errorf("List after the refused and the good names: %d secrets, want the 5 good ones", len(list))
	}
}

func TestBadValues(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.s.Set(ctx, "acme", "X", nil); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "empty") {
		t.Errorf("Set of an empty value: %v, want invalid argument saying it is empty", err)
	}
	err := f.s.Set(ctx, "acme", "X", bytes.Repeat([]byte("v"), 64<<10))
	if !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), "16 KiB") || !strings.Contains(err.Error(), "65536 bytes") {
		t.Errorf("Set of 64 KiB: %v, want too large naming the size and the 16 KiB limit", err)
	}
	if err := f.s.Set(ctx, "acme", "X", bytes.Repeat([]byte("v"), MaxValue+1)); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("Set of MaxValue+1 bytes: %v, want too large", err)
	}
	if list, _ := f.s.List(ctx, "acme"); len(list) != 0 {
		t.Errorf("refused values were stored: %+v", list)
	}
	full := bytes.Repeat([]byte{0, 0xff}, MaxValue/2) // binary, at the limit
	if err := f.s.Set(ctx, "acme", "X", full); err != nil {
		t.Fatal(err)
	}
	if got, err := f.s.Get(ctx, "acme", "X"); err != nil || !bytes.Equal(got, full) {
		t.Errorf("Get of a 16 KiB binary value: %d bytes, %v", len(got), err)
	}
}

// TestScopes: another tenant's secret, and the admin's from a tenant (and
// the reverse), are "not found" in the very words of a missing one.
func TestScopes(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.s.Set(ctx, "beta", "TOKEN", []byte(value)); err != nil {
		t.Fatal(err)
	}
	if err := f.s.Set(ctx, "", "ADMIN_ONLY", []byte(value)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ scope, name string }{{"acme", "TOKEN"}, {"", "TOKEN"}, {"acme", "ADMIN_ONLY"}, {"beta", "ADMIN_ONLY"}} {
		_, err := f.s.Get(ctx, c.scope, c.name)
		wantNotFound(t, fmt.Sprintf("Get(%q, %s)", c.scope, c.name), err, c.name)
		wantNotFound(t, fmt.Sprintf("Delete(%q, %s)", c.scope, c.name), f.s.Delete(ctx, c.scope, c.name), c.name)
	}
	if got, err := f.s.Get(ctx, "beta", "TOKEN"); err != nil || string(got) != value {
		t.Errorf("beta's own secret after the others tried: %v", err)
	}
	if list, _ := f.s.List(ctx, "acme"); len(list) != 0 {
		t.Errorf("acme lists %+v", list)
	}
	if list, _ := f.s.List(ctx, ""); len(list) != 1 || list[0].Name != "ADMIN_ONLY" {
		t.Errorf("the admin lists %+v, want its own only", list)
	}
}

// TestTampered: a sealed row with any one byte flipped, or copied to
// another scope or name, fails to open with a clear error, never a value.
func TestTampered(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.s.Set(ctx, "acme", "TOKEN", []byte(value)); err != nil {
		t.Fatal(err)
	}
	sealed, err := f.st.GetSecret(ctx, "acme", "TOKEN")
	if err != nil {
		t.Fatal(err)
	}
	if len(sealed) != len(value)+Overhead || bytes.Contains(sealed, []byte(value)) {
		t.Fatalf("sealed form: %d bytes (want %d), or holds the value in clear", len(sealed), len(value)+Overhead)
	}
	for i := range sealed {
		bad := bytes.Clone(sealed)
		bad[i] ^= 0x01
		if _, err := f.st.PutSecret(ctx, "acme", "TOKEN", bad, time.Now()); err != nil {
			t.Fatal(err)
		}
		got, err := f.s.Get(ctx, "acme", "TOKEN")
		if got != nil || !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "reins secret set TOKEN") {
			t.Fatalf("byte %d flipped: Get = %q, %v; want a failed precondition saying to set it again", i, got, err)
		}
	}
	for _, c := range []struct{ scope, name string }{{"beta", "TOKEN"}, {"", "TOKEN"}, {"acme", "OTHER"}} {
		if _, err := f.st.PutSecret(ctx, c.scope, c.name, sealed, time.Now()); err != nil {
			t.Fatal(err)
		}
		got, err := f.s.Get(ctx, c.scope, c.name)
		if got != nil || !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "another tenant or name") {
			t.Errorf("acme's TOKEN copied to (%q, %s): Get = %q, %v; want it refused", c.scope, c.name, got, err)
		}
	}
	// Put back whole, it opens.
	if _, err := f.st.PutSecret(ctx, "acme", "TOKEN", sealed, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got, err := f.s.Get(ctx, "acme", "TOKEN"); err != nil || string(got) != value {
		t.Errorf("the untouched row: %q, %v", got, err)
	}
	// A truncated row.
	f.st.PutSecret(ctx, "acme", "TOKEN", sealed[:Overhead-1], time.Now())
	if _, err := f.s.Get(ctx, "acme", "TOKEN"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("a truncated row: %v, want failed precondition", err)
	}
}

// TestOtherKey: a value sealed under another key says so.
func TestOtherKey(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.s.Set(ctx, "acme", "TOKEN", []byte(value)); err != nil {
		t.Fatal(err)
	}
	other, err := LoadKey(filepath.Join(t.TempDir(), KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := New(f.st, other)
	got, err := s2.Get(ctx, "acme", "TOKEN")
	if got != nil || !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "another key") {
		t.Errorf("Get under another key: %q, %v; want failed precondition naming the key", got, err)
	}
	// The same key, loaded again, opens it.
	again, err := LoadKey(filepath.Join(f.dir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	s3, _ := New(f.st, again)
	if got, err := s3.Get(ctx, "acme", "TOKEN"); err != nil || string(got) != value {
		t.Errorf("Get with the key read back: %q, %v", got, err)
	}
}

// TestRedacted: a key prints no byte of itself, however it is formatted
// or logged.
func TestRedacted(t *testing.T) {
	f := newFixture(t)
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("loaded", "key", f.key)
	slog.New(slog.NewTextHandler(&logged, nil)).Info("loaded", "key", f.key)
	keyHex := fmt.Sprintf("%x", f.key.bytes())
	out := fmt.Sprintf("%v %+v %#v %s", f.key, f.key, f.key, f.key) + logged.String()
	if strings.Contains(out, keyHex) || strings.Contains(out, fmt.Sprint(f.key.bytes())) {
		t.Errorf("formatting shows the key:\n%s", out)
	}
}

// TestNotInClear: the database file and its WAL hold the sealed value
// only.
func TestNotInClear(t *testing.T) {
	f := newFixture(t)
	if err := f.s.Set(context.Background(), "acme", "TOKEN", []byte(value)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range []string{"reins.db", "reins.db-wal"} {
		data, err := os.ReadFile(filepath.Join(f.dir, p))
		if err != nil {
			continue
		}
		n += len(data)
		if bytes.Contains(data, []byte(value)) {
			t.Errorf("%s holds the value in clear", p)
		}
	}
	if n == 0 {
		t.Fatal("no database file to look into")
	}
}

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, KeyFile)
	os.WriteFile(path+".new", []byte("leftover of a crash"), 0o600)
	k1, err := LoadKey(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || fi.Size() != KeySize {
		t.Fatalf("the key made on first start: %v, %v; want a regular file of 32 bytes, mode 0600", fi, err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "."+KeyFile+".*")); len(left) != 0 {
		t.Errorf("the key's temporary file is left: %v", left)
	}
	k2, err := LoadKey(path)
	if err != nil || !bytes.Equal(k1.bytes(), k2.bytes()) {
		t.Fatalf("LoadKey again: %v; same key %v", err, err == nil && bytes.Equal(k1.bytes(), k2.bytes()))
	}
	if other, _ := LoadKey(filepath.Join(t.TempDir(), KeyFile)); bytes.Equal(other.bytes(), k1.bytes()) {
		t.Fatal("two new keys are equal")
	}
	good, _ := os.ReadFile(path)

	// Stricter modes are fine.
	for _, mode := range []os.FileMode{0o400, 0o200 | 0o400, 0o000} {
		os.Chmod(path, mode)
		if _, err := LoadKey(path); err != nil {
			t.Errorf("mode %04o: %v", mode, err)
		}
	}
	refused := func(what, wantText string) {
		t.Helper()
		_, err := LoadKey(path)
		if err == nil || !strings.Contains(err.Error(), wantText) {
			t.Errorf("%s: LoadKey = %v, want an error saying %q", what, err, wantText)
		}
		if after, _ := os.ReadFile(path); !bytes.Equal(after, good) && what != "wrong size" {
			t.Errorf("%s: the refused key file was changed", what)
		}
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o606} {
		os.Chmod(path, mode)
		refused(fmt.Sprintf("mode %04o", mode), "chmod 600")
	}
	os.Chmod(path, 0o600)

	if err := os.Chown(path, 1234, 1234); err == nil {
		refused("owned by another user", "owned by uid 1234")
		os.Chown(path, os.Geteuid(), os.Getegid())
	} else if os.Geteuid() == 0 {
		t.Fatalf("chown as root: %v", err)
	}

	for _, size := range []int{0, 31, 33, 64} {
		os.WriteFile(path, bytes.Repeat([]byte{7}, size), 0o600)
		_, err := LoadKey(path)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("has %d bytes, not 32", size)) {
			t.Errorf("a key of %d bytes: %v, want refused naming the size", size, err)
		}
	}
	os.WriteFile(path, good, 0o600)

	// A link to a good key, and a link to nowhere, are refused (the
	// dangling one is not made into a new key behind the link).
	real := filepath.Join(dir, "real.key")
	os.Rename(path, real)
	os.Symlink(real, path)
	refusedLink := func(what string) {
		t.Helper()
		_, err := LoadKey(path)
		if err == nil || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("%s: %v, want refused as a symbolic link", what, err)
		}
	}
	refusedLink("a link to a good key")
	os.Remove(path)
	os.Symlink(filepath.Join(dir, "nowhere"), path)
	refusedLink("a dangling link")
	if _, err := os.Lstat(filepath.Join(dir, "nowhere")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a key was made where the dangling link points")
	}
	os.Remove(path)

	// A directory and a fifo (which must not hang the start).
	os.Mkdir(path, 0o700)
	if _, err := LoadKey(path); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: %v", err)
	}
	os.Remove(path)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(path); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a fifo: %v", err)
	}
}

// A scope holds at most MaxPerScope secrets: a new name past that is
// refused, replacing one it has is not; another scope is not affected.
func TestMaxPerScope(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for i := range MaxPerScope {
		if err := f.s.Set(ctx, "acme", fmt.Sprintf("S%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.s.Set(ctx, "acme", "ONE_MORE", []byte("v")); !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "256") {
		t.Errorf("a new name past the limit: %v", err)
	}
	if err := f.s.Set(ctx, "acme", "S0", []byte("new")); err != nil {
		t.Errorf("replacing a held one: %v", err)
	}
	if err := f.s.Set(ctx, "beta", "ONE_MORE", []byte("v")); err != nil {
		t.Errorf("another scope: %v", err)
	}
	if ok, err := f.s.Has(ctx, "acme", "S5"); !ok || err != nil {
		t.Errorf("Has(S5) = %v, %v", ok, err)
	}
	if ok, err := f.s.Has(ctx, "beta", "S5"); ok || err != nil {
		t.Errorf("Has of another scope's = %v, %v", ok, err)
	}
}
