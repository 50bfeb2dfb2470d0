package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runNode runs a script of testdata with Node, env added, and answers its
// stdout; it fails the test if the script fails.
func runNode(t *testing.T, env []string, script string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{filepath.Join(repoRoot(), "test", "e2e", "testdata", script)}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s %v: %v\nstdout: %s\nstderr: %s", script, args, err, out, stderr.String())
	}
	return string(out)
}

// TestMCPClient: the real MCP client of @modelcontextprotocol/sdk, as a
// tenant, over both transports — stdio (spawning `reins mcp`) and
// streamable HTTP (/mcp on reins serve with the bearer token) — lists the
// tools and their schemas, makes a sandbox, runs commands, writes, reads,
// edits, lists and greps files, moves files in and out (local paths over
// stdio, base64 and an embedded resource over HTTP), asks a port URL,
// deletes the sandbox, and sees bad arguments named in errors
// (testdata/mcp/client.mjs checks every answer).
func TestMCPClient(t *testing.T) {
	requireNodeClients(t, "@modelcontextprotocol/sdk")
	s := startService(t)
	token := s.newTenant("acme")
	for _, mode := range []string{"stdio", "http"} {
		t.Run(mode, func(t *testing.T) {
			env := []string{"REINS_URL=" + s.url, "REINS_TOKEN=" + token, "REINS_BIN=" + filepath.Join(binDir, "reins"), "WORK=" + t.TempDir()}
			out := runNode(t, env, "mcp/client.mjs", mode)
			var seen struct {
				Mode           string   `json:"mode"`
				Tools          []string `json:"tools"`
				Sandbox        string   `json:"sandbox"`
				UnknownSandbox string   `json:"unknown_sandbox"`
				PortURL        string   `json:"port_url"`
			}
			if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &seen); err != nil || seen.Mode != mode {
				t.Fatalf("the client's report %q: %v", out, err)
			}
			if len(seen.Tools) < 12 || !strings.Contains(seen.PortURL, seen.Sandbox) {
				t.Fatalf("the client saw %+v", seen)
			}
			// The sandbox is gone, for the service too.
			if r := s.asTenant(token, "sandbox", "show", seen.Sandbox); r.code == 0 {
				t.Fatalf("sandbox %s outlived its sandbox_delete: %s", seen.Sandbox, r)
			}
		})
	}
}
