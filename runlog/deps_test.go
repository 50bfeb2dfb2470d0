package runlog_test

import (
	"testing"

	"github.com/reinsdev/reins/internal/depstest"
)

// TestDeps fences the log's vocabulary: the CLI and any reader of a run's
// events import it, so it carries words, not the loop or its storage.
func TestDeps(t *testing.T) {
	depstest.Check(t, ".", map[string]string{
		"github.com/reinsdev/reins/agent":    "the loop writes the log; readers must not need it",
		"github.com/reinsdev/reins/policy":   "a decision is recorded as words (PolicyDecision.Action)",
		"github.com/reinsdev/reins/store":    "storage holds the log; the log's words do not need it",
		"github.com/reinsdev/reins/sandbox":  "sandboxes are named by id in the log",
		"github.com/reinsdev/reins/tool":     "tools are named in the log",
		"github.com/reinsdev/reins/executor": "the executor is the hands'",
		"modernc.org/sqlite":                 "storage is the store's",
		"github.com/jackc/pgx":               "storage is the store's",
	})
}
