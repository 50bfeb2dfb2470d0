package e2b_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/fake"
	"github.com/reinsdev/reins/sandbox/manager"
	"github.com/reinsdev/reins/sandbox/template"
	"github.com/reinsdev/reins/server"
	"github.com/reinsdev/reins/server/e2b"
	"github.com/reinsdev/reins/store"
	"github.com/reinsdev/reins/store/sqlite"
)

const adminToken = "reins_0123456789abcdef0123456789abcdef0123456789abcdef"

// env is reins' API over real transports (an httptest server, a SQLite
// store, a sandbox manager over the fake backend) with the E2B front end
// on a server of its own, calling the API as serve does. Sandboxes cannot
// start here (no root, no images): the ones a test needs are stopped,
// recovered from records (seeded: id to tenant).
type env struct {
	t       *testing.T
	api     string
	url     string // the E2B endpoint
	h       *e2b.Handler
	tenants map[string]string
	// templates holds the tenants' template records.
	templates *template.Store
}

func newEnv(t *testing.T, seeded map[string]string) *env {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "reins.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tenants := &server.Tenants{Store: st, Defaults: store.Quota{}}
	exe := filepath.Join(dir, "reins-executor")
	os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755)
	sbDir := filepath.Join(dir, "sandboxes")
	for id, tenant := range seeded {
		rec, _ := json.Marshal(manager.Record{Version: 1, Info: sandbox.Info{ID: id, Tenant: tenant, State: sandbox.StateStopped,
			Reason: sandbox.ReasonExited, Message: "it ended", CreatedAt: time.Now(),
			Spec: sandbox.Spec{Backend: "fake", Image: "busybox", Labels: map[string]string{"e2b.template": "base", "app": "x"}}}})
		os.MkdirAll(filepath.Join(sbDir, id), 0o700)
		if err := os.WriteFile(filepath.Join(sbDir, id, "sandbox.json"), rec, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	m, err := manager.New(manager.Config{
		Dir: sbDir, ExecutorPath: exe, DiskPool: -1,
		Backends: map[string]sandbox.Backend{"fake": fake.New()}, DefaultBackend: "fake",
		Images: noImages{}, MaxSandboxes: tenants.MaxSandboxes,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	if err := m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	templates, err := template.NewStore(filepath.Join(dir, "templates"))
	if err != nil {
		t.Fatal(err)
	}
	m.UseTemplates(templates)
	api := httptest.NewUnstartedServer(server.New(server.Over(m), adminToken, nil).WithTenants(tenants).
		WithTemplates(&template.Builder{Store: templates}).WithExpiries(m).WithPausers(m).WithSuspender(m).
		WithPorts(&server.Ports{Domain: "localhost", Key: make([]byte, 32)}).Handler())
	api.Config.Protocols = new(http.Protocols)
	api.Config.Protocols.SetHTTP1(true)
	api.Config.Protocols.SetUnencryptedHTTP2(true)
	api.Start()
	t.Cleanup(api.Close)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	h := e2b.New(e2b.Config{
		Client: func(token string) *client.Client { return client.NewWithHTTPClient(api.URL, token, hc) },
		Domain: "localhost:7070", Key: []byte(rand.Text()),
	})
	front := httptest.NewServer(h)
	t.Cleanup(front.Close)
	e := &env{t: t, api: api.URL, url: front.URL, h: h, tenants: map[string]string{}, templates: templates}
	return e
}

type noImages struct{}

func (noImages) Resolve(context.Context, string, func(sandbox.Progress)) (manager.Image, error) {
	return manager.Image{}, errors.New("no images in this test")
}

// tenant makes a tenant and returns its token.
func (e *env) tenant(name string) string {
	e.t.Helper()
	ctx := context.Background()
	admin := client.New(e.api, adminToken)
	defer admin.Close()
	if _, err := admin.CreateTenant(ctx, name, nil); err != nil {
		e.t.Fatal(err)
	}
	tok, _, err := admin.TenantToken(ctx, name)
	if err != nil {
		e.t.Fatal(err)
	}
	e.tenants[name] = tok
	return tok
}

// answer is one reply of the E2B endpoint.
type answer struct {
	code   int
	body   string
	header http.Header
}

// call sends method path with body (JSON, or nil) and headers (name,
// value pairs).
func (e *env) call(method, path string, body io.Reader, hdr ...string) answer {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b), resp.Header}
}

// e2bError reads an answer as E2B's error shape, failing the test when it
// is not one with code.
func (a answer) e2bError(t *testing.T, code int) string {
	t.Helper()
	var e struct {
		Code    *int    `json:"code"`
		Message *string `json:"message"`
	}
	if err := json.Unmarshal([]byte(a.body), &e); err != nil || e.Code == nil || e.Message == nil {
		t.Fatalf("answer %d %q is not E2B's error shape {code, message}", a.code, a.body)
	}
	if a.code != code || *e.Code != code {
		t.Fatalf("answer %d (code %d) %q, want %d", a.code, *e.Code, *e.Message, code)
	}
	return *e.Message
}
