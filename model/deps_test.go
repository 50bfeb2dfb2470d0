package model_test

import (
	"testing"

	"github.com/reinsdev/reins/internal/depstest"
)

// TestDeps fences the vocabulary and the providers: a provider is an HTTP
// client of one API and the words of a conversation, nothing more, so a
// gateway or another program can import one without the brain.
func TestDeps(t *testing.T) {
	banned := map[string]string{
		"github.com/reinsdev/reins/agent":    "providers implement model.Model; the loop imports them, never the reverse",
		"github.com/reinsdev/reins/policy":   "the policy engine is the loop's",
		"github.com/reinsdev/reins/store":    "providers keep nothing; the loop records their answers",
		"github.com/reinsdev/reins/tool":     "tools are the loop's; a provider sees only ToolSpec",
		"github.com/reinsdev/reins/sandbox":  "sandboxes are the hands'",
		"github.com/reinsdev/reins/executor": "the executor runs inside sandboxes",
		"github.com/reinsdev/reins/server":   "the service wires providers in, not the reverse",
		"github.com/reinsdev/reins/api":      "the service's wire types are not a provider's",
		"modernc.org/sqlite":                 "storage is the store's",
		"github.com/jackc/pgx":               "storage is the store's",
		"k8s.io":                             "Kubernetes is a sandbox backend's",
	}
	for _, pkg := range []string{".", "./anthropic", "./openai", "./script", "./retry"} {
		depstest.Check(t, pkg, banned)
	}
	// Each provider speaks only its own API.
	depstest.Check(t, "./anthropic", map[string]string{"github.com/openai": "anthropic's provider must not pull in OpenAI's SDK"})
	depstest.Check(t, "./openai", map[string]string{"github.com/anthropics": "openai's provider must not pull in Anthropic's SDK"})
	depstest.Check(t, "./script", map[string]string{
		"github.com/openai":     "the script model is offline",
		"github.com/anthropics": "the script model is offline",
	})
}
