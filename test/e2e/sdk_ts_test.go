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

// The TypeScript client (sdk/ts) and its deepagents backend, tested with
// Debian's Node against a real reins serve with gVisor sandboxes: node's
// own test runner runs sdk/ts/test/*.test.mjs with REINS_URL and
// REINS_TOKEN naming the service.

func TestTSClient(t *testing.T) {
	runNodeTests(t, "client.test.mjs")
}

// TestTSTypes compiles a usage of the hand-written declarations (no
// service needed).
func TestTSTypes(t *testing.T) {
	nodeTest(t, nil, "types.test.mjs")
}

func TestTSDeepAgents(t *testing.T) {
	runNodeTests(t, "deepagents.test.mjs")
}

// TestHostileTSSDK: lying envelope lengths, cut streams, answers that are
// not what was asked, and paths that try to become shell in the deepagents
// backend's fallbacks (sdk/ts/test/hostile.test.mjs).
func TestHostileTSSDK(t *testing.T) {
	runNodeTests(t, "hostile.test.mjs")
}

// runNodeTests runs the named test files of sdk/ts/test against a fresh
// service and checks that they left no sandbox behind.
func runNodeTests(t *testing.T, files ...string) {
	t.Helper()
	requireNodeClients(t, "deepagents", "@langchain/core")
	s := startService(t)
	nodeTest(t, []string{"REINS_URL=" + s.url, "REINS_TOKEN=" + s.token}, files...)
	if left := s.run("sandbox", "ls", "--json"); strings.Contains(left.stdout, `"id"`) {
		t.Errorf("the node tests left sandboxes behind:\n%s", left.stdout)
	}
}

// nodeTest runs the named test files of sdk/ts/test with node's test
// runner, env added to its environment.
func nodeTest(t *testing.T, env []string, files ...string) {
	t.Helper()
	node := testenv.RequiresBinary(t, "node", "nodejs")
	requireNodeClients(t, "typescript", "deepagents")
	dir := filepath.Join(repoRoot(), "sdk", "ts")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	args := []string{"--test", "--test-reporter=spec"}
	for _, f := range files {
		args = append(args, filepath.Join("test", f))
	}
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "NO_COLOR=1"), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test %s: %v\n%s", strings.Join(files, " "), err, out)
	}
	t.Logf("%s", out)
}
