package gvisor_test

import (
	"testing"

	"github.com/reinsdev/reins/sandbox/gvisor"
	"github.com/reinsdev/reins/sandbox/sandboxtest"
)

// BenchmarkStart compares Start→running→Delete with raw
// `runsc --network=none run` of /bin/true on the same bundle.
func BenchmarkStart(b *testing.B) {
	sandboxtest.BenchStart(b, newBackend(b, b.TempDir()), gvisor.DefaultRunsc(), "--network=none")
}
