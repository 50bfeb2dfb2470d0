package runc_test

import (
	"testing"

	"github.com/reinsdev/reins/sandbox/sandboxtest"
)

// BenchmarkStart compares Start→running→Delete with raw `runc run` of
// /bin/true on the same bundle.
func BenchmarkStart(b *testing.B) {
	sandboxtest.BenchStart(b, newBackend(b, b.TempDir()), "runc")
}
