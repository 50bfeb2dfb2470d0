package agent_test

import (
	"testing"

	"github.com/reinsdev/reins/internal/depstest"
)

// TestDeps fences the loop: it talks to models through model.Model, to
// sandboxes through agent.Sandboxes and sandboxtool.Executor, and to
// storage through store.Store; which provider, backend or database is
// cmd's choice.
func TestDeps(t *testing.T) {
	depstest.Check(t, ".", map[string]string{
		"github.com/reinsdev/reins/model/anthropic": "providers are chosen in cmd",
		"github.com/reinsdev/reins/model/openai":    "providers are chosen in cmd",
		"github.com/anthropics":                     "providers are chosen in cmd",
		"github.com/openai":                         "providers are chosen in cmd",
		"github.com/reinsdev/reins/sandbox/manager": "the loop asks for sandboxes through an interface",
		"github.com/reinsdev/reins/sandbox/oci":     "backends are chosen in cmd",
		"github.com/reinsdev/reins/sandbox/gvisor":  "backends are chosen in cmd",
		"github.com/reinsdev/reins/sandbox/runc":    "backends are chosen in cmd",
		"github.com/reinsdev/reins/image":           "images are the sandbox service's",
		"github.com/reinsdev/reins/server":          "the service serves the loop, not the reverse",
		"github.com/reinsdev/reins/store/sqlite":    "stores are chosen in cmd",
		"github.com/reinsdev/reins/api/reins/v1":    "the public wire is the server's; the loop has its own types",
		"k8s.io":                                    "Kubernetes is a sandbox backend's",
		"github.com/reinsdev/reins/executor":        "the loop reaches executors through sandboxtool.Executor (Sandboxes.Executor), not a client or the server",
	})
	// What a sandbox tool does is the tools' package (tool/sandboxtool):
	// the loop picks and heals the sandbox and records what a tool
	// returns. It names no executor call itself, so a backend's way of
	// reaching its executor can change without the loop.
	imports, err := depstest.Imports(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range imports {
		if p == "github.com/reinsdev/reins/api/reins/executor/v1" || p == "github.com/reinsdev/reins/sandbox" {
			t.Errorf("the loop imports %s directly: sandbox tools and their wire belong in tool/sandboxtool", p)
		}
	}
}
