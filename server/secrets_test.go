package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/secret"
	"github.com/reinsdev/reins/server"
	"github.com/reinsdev/reins/store"
	"github.com/reinsdev/reins/store/sqlite"
)

// lockedBuffer is a log sink the handlers may write from many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type secretEnv struct {
	dir, url string
	log      *lockedBuffer
	admin    *client.Client
	tenant   map[string]*client.Client
}

// newSecretEnv serves the secret API over a real SQLite file and key,
// logging everything at debug level into a buffer, with tenants acme
// and beta.
func newSecretEnv(t *testing.T) *secretEnv {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "reins.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	key, err := secret.LoadKey(filepath.Join(dir, secret.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := secret.New(st, key)
	if err != nil {
		t.Fatal(err)
	}
	e := &secretEnv{dir: dir, log: &lockedBuffer{}, tenant: map[string]*client.Client{}}
	log := slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv := httptest.NewUnstartedServer(server.New(nil, adminToken, log).WithTenants(&server.Tenants{Store: st}).WithSecrets(secrets).Handler())
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	e.url = srv.URL
	e.admin = client.New(srv.URL, adminToken)
	for _, name := range []string{"acme", "beta"} {
		if err := st.CreateTenant(context.Background(), store.Tenant{Name: name}); err != nil {
			t.Fatal(err)
		}
		tok := server.NewToken()
		if _, err := st.SetTenantToken(context.Background(), name, server.HashToken(tok)); err != nil {
			t.Fatal(err)
		}
		e.tenant[name] = client.New(srv.URL, tok)
	}
	return e
}

// TestSecretAPIScopes: each token works on its own scope; the admin's is
// its own, not every tenant's; another scope's secret is not found in
// the words of a missing one.
func TestSecretAPIScopes(t *testing.T) {
	e := newSecretEnv(t)
	ctx := context.Background()
	acme, beta := e.tenant["acme"], e.tenant["beta"]
	if s, err := acme.SetSecret(ctx, "TOKEN", []byte("acme-value")); err != nil || s.GetName() != "TOKEN" || s.GetSize() != int64(len("acme-value")) || s.GetCreatedUnixNano() == 0 {
		t.Fatalf("acme SetSecret = %v, %v", s, err)
	}
	if _, err := e.admin.SetSecret(ctx, "ADMIN_TOKEN", []byte("admin-value")); err != nil {
		t.Fatal(err)
	}
	names := func(c *client.Client) string {
		t.Helper()
		list, err := c.ListSecrets(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range list {
			out = append(out, s.Name)
		}
		return strings.Join(out, ",")
	}
	if got := names(acme); got != "TOKEN" {
		t.Errorf("acme lists %q", got)
	}
	if got := names(beta); got != "" {
		t.Errorf("beta lists %q", got)
	}
	if got := names(e.admin); got != "ADMIN_TOKEN" {
		t.Errorf("the admin lists %q, want its own only", got)
	}
	want := func(name string) string {
		return fmt.Sprintf("secret %s not found: set it with \"reins secret set %s\"", name, name)
	}
	for _, c := range []struct {
		who  string
		cl   *client.Client
		name string
	}{{"beta", beta, "TOKEN"}, {"admin", e.admin, "TOKEN"}, {"acme", acme, "ADMIN_TOKEN"}, {"beta", beta, "NEVER_SET"}} {
		err := c.cl.DeleteSecret(ctx, c.name)
		if !errors.Is(err, errdefs.ErrNotFound) || err.Error() != want(c.name) {
			t.Errorf("%s deletes %s: %v, want %q", c.who, c.name, err, want(c.name))
		}
	}
	if got := names(acme); got != "TOKEN" {
		t.Errorf("acme's secret after the others' deletes: %q", got)
	}
	if err := acme.DeleteSecret(ctx, "TOKEN"); err != nil {
		t.Fatal(err)
	}
	if got := names(acme); got != "" {
		t.Errorf("acme lists %q after deleting its only secret", got)
	}
}

// TestSecretAPIBadInput: the kinds and messages survive the wire.
func TestSecretAPIBadInput(t *testing.T) {
	e := newSecretEnv(t)
	ctx := context.Background()
	cl := e.tenant["acme"]
	for _, name := range []string{"", "1X", "A-B", strings.Repeat("N", 200), "A\x00B"} {
		_, err := cl.SetSecret(ctx, name, []byte("v"))
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "letters, digits and '_'") {
			t.Errorf("SetSecret(%q): %v", name, err)
		}
		if err := cl.DeleteSecret(ctx, name); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("DeleteSecret(%q): %v", name, err)
		}
	}
	if _, err := cl.SetSecret(ctx, "X", nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("an empty value: %v", err)
	}
	_, err := cl.SetSecret(ctx, "X", bytes.Repeat([]byte("v"), 64<<10))
	if !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), "over the limit of 16 KiB") {
		t.Errorf("a 64 KiB value: %v, want too large naming the limit", err)
	}
	if list, _ := cl.ListSecrets(ctx); len(list) != 0 {
		t.Errorf("refused sets stored %v", list)
	}
	// No token, a wrong one.
	for _, tok := range []string{"", "reins_wrong"} {
		_, err := client.New(e.url, tok).ListSecrets(ctx)
		if !errors.Is(err, errdefs.ErrUnauthenticated) {
			t.Errorf("ListSecrets with token %q: %v", tok, err)
		}
	}
}

// TestSecretsDoNotLeak: a recognisable value, set, replaced, listed,
// refused and deleted every way the API allows, appears in no answer, no
// error, no log line (at debug level) and nowhere in clear in the
// database or its WAL.
func TestSecretsDoNotLeak(t *testing.T) {
	e := newSecretEnv(t)
	ctx := context.Background()
	const value = "leak-canary-3b1f9e-DO-NOT-PRINT"
	cl := e.tenant["acme"]
	var seen bytes.Buffer
	note := func(v ...any) { fmt.Fprintln(&seen, v...) }

	s, err := cl.SetSecret(ctx, "CANARY", []byte(value))
	note(s, err)
	s, err = e.admin.SetSecret(ctx, "CANARY", []byte(value+"-admin"))
	note(s, err)
	_, err = cl.SetSecret(ctx, "BAD-NAME", []byte(value))
	note(err)
	_, err = cl.SetSecret(ctx, "BIG", []byte(strings.Repeat(value, 3000)))
	note(err)
	list, err := cl.ListSecrets(ctx)
	note(list, err)
	note(e.tenant["beta"].DeleteSecret(ctx, "CANARY"))

	// The JSON API, as curl sees it, including a request it cannot read.
	post := func(method, body string) {
		req, _ := http.NewRequest("POST", e.url+"/reins.v1.SecretService/"+method, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		note(resp.StatusCode, string(b))
	}
	post("List", `{}`)
	post("Set", `{"name": "CANARY2", "value": "`+value+`!!"}`) // not base64
	post("Set", `{"name": "CANARY3", "value": 12, "x": "`+value+`"}`)

	for _, f := range []string{"reins.db", "reins.db-wal"} {
		data, err := os.ReadFile(filepath.Join(e.dir, f))
		if err != nil && f == "reins.db" {
			t.Fatal(err)
		}
		if bytes.Contains(data, []byte(value)) {
			t.Errorf("%s holds the value in clear", f)
		}
	}
	if strings.Contains(seen.String(), value) {
		t.Errorf("an answer or an error shows the value:\n%s", seen.String())
	}
	if strings.Contains(e.log.String(), value) {
		t.Errorf("the service's log shows the value:\n%s", e.log.String())
	}
	if !strings.Contains(seen.String(), "CANARY") || len(list) != 1 ||
		strings.Count(seen.String(), "not JSON of a reins.v1.SetSecretRequest") != 2 {
		t.Fatalf("the calls did not happen as meant:\n%s", seen.String())
	}
}
