package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reinsdev/reins/internal/testenv"
)

// requireNodeClients fails (under CI) or skips unless the npm clients of
// test/node are linked at the repository's root.
func requireNodeClients(t *testing.T, pkg string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(repoRoot(), "node_modules", pkg, "package.json")); err != nil {
		testenv.Missing(t, "the npm package %s is not in node_modules: run sh scripts/node-clients.sh", pkg)
	}
	testenv.RequiresBinary(t, "node", "nodejs")
}

// The unmodified e2b SDK from npm drives reins serve --e2b-addr as a
// tenant, with its key in the form the SDK's key check accepts: create
// with metadata, envs and a timeout, getInfo, setTimeout, updateNetwork,
// list with a metadata filter and paging, metrics, getHost, a call reins
// does not implement; commands with streaming callbacks, exit codes and
// CommandExitError, files (write, read, list, exists, makeDir, rename,
// remove), a background command listed and killed, a server in the
// sandbox reached through getHost and the port proxy; pause, connect
// (the files kept), kill and what a killed sandbox answers
// (testdata/e2b/sdk.mjs checks every call).
func TestE2BSDK(t *testing.T) {
	requireSandboxes(t)
	requireNodeClients(t, "e2b")
	e2bAddr := freeAddr(t)
	s := startService(t, "--e2b-addr", e2bAddr)
	s.must("tenant", "create", "e2b")
	tok := strings.TrimSpace(s.must("tenant", "token", "e2b"))
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("test", "e2e", "testdata", "e2b", "sdk.mjs"))
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(),
		"E2B_API_URL=http://"+e2bAddr, "E2B_SANDBOX_URL=http://"+e2bAddr,
		"E2B_API_KEY=e2b_"+strings.TrimPrefix(tok, "reins_"),
		"REINS_PORT_ADDR="+s.addr, "REINS_TOKEN="+tok)
	out, err := cmd.CombinedOutput()
	t.Logf("sdk.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("the e2b SDK script failed: %v", err)
	}
	if !strings.Contains(string(out), "all calls checked") {
		t.Fatal("the script ended without checking every call")
	}
	s.stop() // its log is whole once it has exited
	if log := s.log.String(); !strings.Contains(log, `msg="reins serving the E2B API" addr=`+e2bAddr) {
		t.Errorf("the startup log does not say where the E2B API listens:\n%s", log)
	}
}
