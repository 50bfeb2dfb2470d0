package proxy_test

import (
	"testing"

	"github.com/reinsdev/reins/internal/depstest"
)

// The proxy is a leaf the boundary service wires: it decides with the
// egress vocabulary and knows nothing of the rest of the service.
func TestDeps(t *testing.T) {
	depstest.Check(t, ".", map[string]string{
		"github.com/reinsdev/reins/sandbox":      "the proxy is told about sandboxes (Add), it does not reach into their manager",
		"github.com/reinsdev/reins/store":        "secrets come in Add/Update; the proxy stores nothing",
		"github.com/reinsdev/reins/server":       "the API wires the proxy, never the reverse",
		"github.com/reinsdev/reins/agent":        "the agent loop is not on the network path",
		"github.com/reinsdev/reins/model":        "model providers are not on the network path",
		"github.com/reinsdev/reins/egress/netns": "namespaces and firewall are the boundary's to join with the proxy",
		"modernc.org/sqlite":                     "no store in the proxy",
	})
}
