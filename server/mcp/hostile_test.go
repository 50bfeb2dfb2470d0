package mcp_test

import (
	"archive/tar"
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/server/mcp"
)

// TestHostileMCPDownloadEscape: a sandbox answers a download (stdio: into
// a local directory) with a tar whose entries lead out of it: a symlink to
// a host directory and a file written through it, a hard link to a host
// file, an absolute name, a name climbing out. Nothing is written outside
// the chosen local directory.
func TestHostileMCPDownloadEscape(t *testing.T) {
	base := t.TempDir()
	local := filepath.Join(base, "local")
	victim := filepath.Join(base, "victim")
	for _, d := range []string{local, victim} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(base, "secret.txt")
	if err := os.WriteFile(secret, []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string][]*tar.Header{
		"benign": {
			{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755},
			{Name: "d/ok.txt", Typeflag: tar.TypeReg, Mode: 0o644},
		},
		"symlink then through it": {
			{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755},
			{Name: "d/link", Typeflag: tar.TypeSymlink, Linkname: victim},
			{Name: "d/link/pwned.txt", Typeflag: tar.TypeReg, Mode: 0o644},
		},
		"relative symlink climbing out": {
			{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755},
			{Name: "d/up", Typeflag: tar.TypeSymlink, Linkname: "../../victim"},
			{Name: "d/up/pwned.txt", Typeflag: tar.TypeReg, Mode: 0o644},
		},
		"hard link to a host file": {
			{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755},
			{Name: "d/hard", Typeflag: tar.TypeLink, Linkname: secret},
		},
		"names out of the directory": {
			{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755},
			{Name: "d/../../victim/pwned.txt", Typeflag: tar.TypeReg, Mode: 0o644},
			{Name: "/" + strings.TrimPrefix(victim, "/") + "/abs.txt", Typeflag: tar.TypeReg, Mode: 0o644},
		},
	}
	for name, entries := range cases {
		t.Run(name, func(t *testing.T) {
			sb := &fakeSandbox{id: "0123456789ab", tarBytes: tarOf(t, entries...)}
			cs := connectLocal(t, newFake(t, sb), mcp.Options{Local: true})
			dest := t.TempDir()
			r, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "download", Arguments: map[string]any{
				"sandbox_id": sb.id, "path": "/work/d", "local_dir": dest,
			}})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("answer (error %v): %s", r.IsError, contentText(r))
			if name == "benign" {
				if data, err := os.ReadFile(filepath.Join(dest, "d", "ok.txt")); err != nil || string(data) != "pwned\n" || r.IsError {
					t.Fatalf("a plain download did not land: %q %v", data, err)
				}
			}
			if left, _ := os.ReadDir(victim); len(left) > 0 {
				t.Fatalf("the download wrote into a host directory outside local_dir: %v", left)
			}
			if data, _ := os.ReadFile(secret); string(data) != "host secret\n" {
				t.Fatalf("the host file outside local_dir changed: %q", data)
			}
			// Whatever was made stays under dest, and no link in it
			// leads out to a file.
			filepath.Walk(dest, func(p string, fi os.FileInfo, err error) error {
				if err == nil && fi.Mode().IsRegular() {
					if data, _ := os.ReadFile(p); string(data) == "host secret\n" {
						t.Errorf("%s reaches the host file", p)
					}
				}
				return nil
			})
		})
	}
}

// httpHarness serves NewHTTP with the tenant named by a test header (the
// API's auth middleware names it in reins serve).
type httpHarness struct {
	srv *httptest.Server
	h   *mcp.HTTP
}

const tenantHeader = "X-Test-Tenant"

func newHTTP(t *testing.T, c *client.Client, cfg mcp.HTTPConfig) *httpHarness {
	t.Helper()
	cfg.Client = func(token string) *client.Client { return c }
	cfg.Tenant = func(r *http.Request) string { return r.Header.Get(tenantHeader) }
	h := mcp.NewHTTP(cfg)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &httpHarness{srv: srv, h: h}
}

type withHeader struct {
	rt     http.RoundTripper
	tenant string
}

func (w withHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(tenantHeader, w.tenant)
	r.Header.Set("Authorization", "Bearer tok")
	return w.rt.RoundTrip(r)
}

// connect opens an MCP session as tenant.
func (hh *httpHarness) connect(t *testing.T, tenant string) (*sdk.ClientSession, error) {
	t.Helper()
	tr := &sdk.StreamableClientTransport{Endpoint: hh.srv.URL, MaxRetries: -1, DisableStandaloneSSE: true,
		HTTPClient: &http.Client{Transport: withHeader{rt: http.DefaultTransport, tenant: tenant}}}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

// TestHostileMCPHugeUpload: over HTTP, a base64 upload bigger than the
// inline bound is refused naming the argument and the raw file API, and
// writes nothing; a request bigger than the body bound is refused before
// it is read whole.
func TestHostileMCPHugeUpload(t *testing.T) {
	sb := &fakeSandbox{id: "0123456789ab"}
	// A small bound keeps the test quick; the code is the default's.
	const bound = 1 << 20
	hh := newHTTP(t, newFake(t, sb), mcp.HTTPConfig{Options: mcp.Options{MaxInline: bound}})
	cs, err := hh.connect(t, "acme")
	if err != nil {
		t.Fatal(err)
	}
	big := base64.StdEncoding.EncodeToString(make([]byte, bound+1))
	msg := toolError(t, cs, "upload", map[string]any{"sandbox_id": sb.id, "path": "/work/big", "content_base64": big})
	for _, want := range []string{"content_base64", "/v1/sandboxes/ID/files"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the refusal %q does not name %q", msg, want)
		}
	}
	fits := base64.StdEncoding.EncodeToString(make([]byte, bound))
	if r, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "upload", Arguments: map[string]any{
		"sandbox_id": sb.id, "path": "/work/fits", "content_base64": fits}}); err != nil || r.IsError {
		t.Fatalf("an upload of exactly the bound failed: %v %s", err, contentText(r))
	}
	huge := strings.Repeat("A", 3*bound)
	if _, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "upload", Arguments: map[string]any{
		"sandbox_id": sb.id, "path": "/work/huge", "content_base64": huge}}); err == nil {
		t.Fatal("a request three times the inline bound was read")
	}
	if _, ok := sb.files["/work/big"]; ok {
		t.Error("the refused upload was written")
	}
	if _, ok := sb.files["/work/huge"]; ok {
		t.Error("the refused request was written")
	}
}

// TestHostileMCPTooManySessions: a tenant's sessions are bounded; another
// tenant is not held back by them, and a closed session frees its slot.
func TestHostileMCPTooManySessions(t *testing.T) {
	hh := newHTTP(t, client.New("http://127.0.0.1:1", "tok"), mcp.HTTPConfig{MaxSessions: 2})
	a1, err := hh.connect(t, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hh.connect(t, "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := hh.connect(t, "acme"); err == nil {
		t.Fatal("a third session of a tenant bounded to 2 was opened")
	}
	// What the refusal says, as any client sees it.
	code, body := hh.post(t, "acme", "", `{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if code != http.StatusTooManyRequests || !strings.Contains(body, "too many MCP sessions") || !strings.Contains(body, `"id":7`) {
		t.Fatalf("a third session: %d %s", code, body)
	}
	if _, err := hh.connect(t, "beta"); err != nil {
		t.Fatalf("another tenant was refused a session: %v", err)
	}
	a1.Close()
	deadline := time.Now().Add(10 * time.Second)
	for hh.h.Sessions("acme") > 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := hh.connect(t, "acme"); err != nil {
		t.Fatalf("a closed session did not free its slot: %v", err)
	}
}

// TestHostileMCPSessionOfAnotherTenant: a request naming another tenant's
// session id is answered exactly as one naming no session at all.
func TestHostileMCPSessionOfAnotherTenant(t *testing.T) {
	sb := &fakeSandbox{id: "0123456789ab"}
	hh := newHTTP(t, newFake(t, sb), mcp.HTTPConfig{})
	if _, err := hh.connect(t, "acme"); err != nil {
		t.Fatal(err)
	}
	var acmeSession string
	for id := range sessionsOf(t, hh) {
		acmeSession = id
	}
	const list = `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	code, body := hh.post(t, "beta", acmeSession, list)
	mcode, mbody := hh.post(t, "beta", "00000000000000000000000000000000", list)
	if code != http.StatusNotFound || code != mcode || body != mbody {
		t.Fatalf("beta with acme's session: %d %s; with a made-up one: %d %s", code, body, mcode, mbody)
	}
	if strings.Contains(body, "tools") {
		t.Fatalf("beta reached acme's session: %s", body)
	}
}

// post sends one JSON-RPC message as tenant, in session (if not "").
func (hh *httpHarness) post(t *testing.T, tenant, session, msg string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", hh.srv.URL, strings.NewReader(msg))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	req.Header.Set(tenantHeader, tenant)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// sessionsOf lists the session ids the handler holds, through its
// test hook.
func sessionsOf(t *testing.T, hh *httpHarness) map[string]string {
	t.Helper()
	return mcp.SessionsForTest(hh.h)
}
