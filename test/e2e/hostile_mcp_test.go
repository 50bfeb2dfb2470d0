package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestHostileMCPToken: /mcp without a token, or with a wrong one, is 401
// before any MCP is spoken.
func TestHostileMCPToken(t *testing.T) {
	s := startService(t)
	for name, header := range map[string]string{
		"none":        "",
		"wrong":       "Bearer reins_" + strings.Repeat("0", 64),
		"not bearer":  "Basic " + base64.StdEncoding.EncodeToString([]byte("admin:"+s.token)),
		"token alone": s.token,
	} {
		req, _ := http.NewRequest("POST", s.url+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: /mcp answered %d, want 401", name, resp.StatusCode)
		}
	}
}

type bearer struct {
	rt    http.RoundTripper
	token string
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

// mcpSession opens an MCP session at the service's /mcp with token.
func (s *service) mcpSession(t *testing.T, token string) *sdk.ClientSession {
	t.Helper()
	tr := &sdk.StreamableClientTransport{Endpoint: s.url + "/mcp", MaxRetries: -1, DisableStandaloneSSE: true,
		HTTPClient: &http.Client{Transport: bearer{rt: http.DefaultTransport, token: token}}}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// mcpAnswer is a tool call's text and whether it was an error.
func mcpAnswer(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	r, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return err.Error(), true
	}
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), r.IsError
}

// TestHostileMCPOtherTenant: tenant beta's MCP session calls every tool
// that takes a sandbox with acme's sandbox id; each answer is the one for
// an id that does not exist (the id swapped), acme's sandbox is untouched,
// and beta's list does not show it.
func TestHostileMCPOtherTenant(t *testing.T) {
	s := startService(t)
	acme := s.newTenant("acme")
	beta := s.newTenant("beta")
	sbx := strings.TrimSpace(s.asTenant(acme, "sandbox", "create").stdout)
	if sbx == "" {
		t.Fatal("acme could not create a sandbox")
	}
	s.asTenant(acme, "sandbox", "exec", sbx, "--", "sh", "-c", "echo acme > /tmp/mine")
	r := s.asTenant(acme, "run", "--json", "--model", "script:"+writeScript(t, map[string]any{"text": "hi"}), "say hi")
	var run struct{ ID string }
	if err := json.Unmarshal([]byte(r.stdout), &run); r.code != 0 || err != nil || run.ID == "" {
		t.Fatalf("acme's run: %s", r)
	}
	const missing, missingRun = "0123456789ab", "run_00000000deadbeef"
	cs := s.mcpSession(t, beta)
	calls := []struct {
		tool string
		args func(id string) map[string]any
	}{
		{"exec", func(id string) map[string]any {
			return map[string]any{"sandbox_id": id, "command": "echo beta > /tmp/mine"}
		}},
		{"read_file", func(id string) map[string]any { return map[string]any{"sandbox_id": id, "path": "/tmp/mine"} }},
		{"read_file", func(id string) map[string]any {
			return map[string]any{"sandbox_id": id, "path": "/tmp/mine", "start_line": 1}
		}},
		{"write_file", func(id string) map[string]any {
			return map[string]any{"sandbox_id": id, "path": "/tmp/mine", "content": "beta"}
		}},
		{"edit_file", func(id string) map[string]any {
			return map[string]any{"sandbox_id": id, "path": "/tmp/mine", "old_string": "acme", "new_string": "beta"}
		}},
		{"list_files", func(id string) map[string]any { return map[string]any{"sandbox_id": id, "path": "/tmp"} }},
		{"list_files", func(id string) map[string]any { return map[string]any{"sandbox_id": id, "path": "/", "glob": "tmp/*"} }},
		{"grep", func(id string) map[string]any {
			return map[string]any{"sandbox_id": id, "pattern": "acme", "path": "/tmp"}
		}},
		{"upload", func(id string) map[string]any {
			return map[string]any{"sandbox_id": id, "path": "/tmp/new", "content_base64": "YmV0YQ=="}
		}},
		{"download", func(id string) map[string]any { return map[string]any{"sandbox_id": id, "path": "/tmp/mine"} }},
		{"port_url", func(id string) map[string]any { return map[string]any{"sandbox_id": id, "port": 8080} }},
		{"run_start", func(id string) map[string]any {
			return map[string]any{"sandbox_id": id, "task": "x", "script": map[string]any{"turns": []any{map[string]any{"text": "hi"}}}}
		}},
		{"sandbox_delete", func(id string) map[string]any { return map[string]any{"sandbox_id": id} }},
	}
	for _, c := range calls {
		got, gotErr := mcpAnswer(t, cs, c.tool, c.args(sbx))
		want, wantErr := mcpAnswer(t, cs, c.tool, c.args(missing))
		if !gotErr || !wantErr {
			t.Errorf("%s: beta's call on acme's sandbox (error %v: %s) or on a missing one (error %v: %s) did not fail", c.tool, gotErr, got, wantErr, want)
			continue
		}
		if strings.ReplaceAll(got, sbx, missing) != want {
			t.Errorf("%s: acme's sandbox answered\n  %s\nwhere a missing one answers\n  %s", c.tool, got, want)
		}
	}
	got, _ := mcpAnswer(t, cs, "run_get", map[string]any{"run_id": run.ID})
	want, _ := mcpAnswer(t, cs, "run_get", map[string]any{"run_id": missingRun})
	if strings.ReplaceAll(got, run.ID, missingRun) != want || !strings.Contains(want, "not found") {
		t.Errorf("run_get of acme's run answered\n  %s\nwhere a missing one answers\n  %s", got, want)
	}
	if got, _ := mcpAnswer(t, cs, "sandbox_list", map[string]any{}); strings.Contains(got, sbx) {
		t.Errorf("beta's sandbox_list shows acme's sandbox: %s", got)
	}
	if r := s.asTenant(acme, "sandbox", "exec", sbx, "--", "cat", "/tmp/mine"); r.code != 0 || r.stdout != "acme\n" {
		t.Fatalf("acme's sandbox after beta's calls: %s", r)
	}
}
