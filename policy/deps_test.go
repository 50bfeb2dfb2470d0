package policy_test

import (
	"testing"

	"github.com/reinsdev/reins/internal/depstest"
)

// TestDeps fences the policy: it decides from a call's spec, its arguments
// and the run's state, and knows no tool, store or sandbox.
func TestDeps(t *testing.T) {
	depstest.Check(t, ".", map[string]string{
		"github.com/reinsdev/reins/tool/trusted": "tools declare how their arguments read on their spec (tool.Spec.Args); the policy never imports one",
		"github.com/reinsdev/reins/agent":        "the loop asks the policy, not the reverse",
		"github.com/reinsdev/reins/store":        "a decision is a pure function; the loop records it",
		"github.com/reinsdev/reins/sandbox":      "sandboxes are the hands'",
		"github.com/reinsdev/reins/executor":     "the executor runs inside sandboxes",
		"github.com/reinsdev/reins/model":        "the policy sees tool calls, not conversations",
		"github.com/reinsdev/reins/server":       "the service wires the policy in, not the reverse",
		"database/sql":                           "SQL is classified by the tool that runs it",
		"modernc.org/sqlite":                     "storage is the store's",
		"github.com/jackc/pgx":                   "storage is the store's",
	})
}
