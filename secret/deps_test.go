package secret

import (
	"testing"

	"github.com/reinsdev/reins/internal/depstest"
)

const self = "github.com/reinsdev/reins/secret"

// TestDeps fences the secrets both ways: what runs in or manages a
// sandbox never reaches them (values live on the trusted side; the proxy,
// in the service, puts them into requests), and this package reaches
// none of that.
func TestDeps(t *testing.T) {
	const why = "secrets stay on the trusted side: a sandbox sees placeholders, the service's proxy injects values"
	for _, pkg := range []string{
		"github.com/reinsdev/reins/cmd/reins-executor",
		"github.com/reinsdev/reins/executor/...",
		"github.com/reinsdev/reins/sandbox/...",
	} {
		depstest.Check(t, pkg, map[string]string{self: why})
	}
	depstest.Check(t, ".", map[string]string{
		"github.com/reinsdev/reins/sandbox":  "secrets know nothing of sandboxes; the service binds them to one",
		"github.com/reinsdev/reins/executor": "the executor runs in the sandbox",
		"github.com/reinsdev/reins/server":   "the API serves secrets, not the reverse",
		"github.com/reinsdev/reins/agent":    "the loop is a user of secrets, not a part",
		"modernc.org/sqlite":                 "secrets are kept through store.Secrets; the store is chosen in cmd",
	})
}

// TestDepsFenceBites: the fence would catch this package in a sandbox
// package's dependencies (it finds itself through the pattern's syntax).
func TestDepsFenceBites(t *testing.T) {
	bad, err := depstest.Violations(self, map[string]string{self: "x"})
	if err != nil || len(bad) != 1 {
		t.Fatalf("banning the secret package in its own deps: %q, %v", bad, err)
	}
}
