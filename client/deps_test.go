package client_test

import (
	"testing"

	"github.com/reinsdev/reins/internal/depstest"
)

// TestDeps fences the Go client: programs that drive reins serve import it,
// so it carries the wire types and errdefs and none of the service.
func TestDeps(t *testing.T) {
	depstest.Check(t, ".", map[string]string{
		"github.com/reinsdev/reins/agent":   "the loop runs in the service",
		"github.com/reinsdev/reins/model":   "models are the service's; the client names them as strings",
		"github.com/reinsdev/reins/policy":  "the client sends policy documents as text",
		"github.com/reinsdev/reins/store":   "the service's storage",
		"github.com/reinsdev/reins/sandbox": "sandbox management is the service's",
		"github.com/reinsdev/reins/server":  "the service itself",
		"github.com/reinsdev/reins/image":   "images are pulled by the service",
		"github.com/reinsdev/reins/tool":    "tools run in the service",
		"modernc.org/sqlite":                "storage is the service's",
		"github.com/jackc/pgx":              "storage is the service's",
		"github.com/anthropics":             "model SDKs are the service's",
		"github.com/openai":                 "model SDKs are the service's",
		"k8s.io":                            "Kubernetes is a sandbox backend's",
	})
}
