package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/reinsdev/reins/internal/testenv"
)

// requireNodeClients needs Node and the named npm packages (pinned by
// test/node/package.json) in the node_modules that scripts/node-clients.sh
// links at the repository's root (make test runs it).
func requireNodeClients(t *testing.T, pkgs ...string) {
	t.Helper()
	testenv.RequiresBinary(t, "node", "nodejs")
	for _, p := range pkgs {
		if _, err := os.Stat(filepath.Join(repoRoot(), "node_modules", p, "package.json")); err != nil {
			testenv.Missing(t, "the npm package %s is not in node_modules at the repository's root: run sh scripts/node-clients.sh", p)
		}
	}
}
