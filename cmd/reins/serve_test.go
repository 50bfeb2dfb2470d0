package main

import (
	"errors"
	"strings"
	"testing"
)

// A negative --disk-pool is a usage error before anything is started.
func TestServeRefusesNegativeDiskPool(t *testing.T) {
	err := serve(serveConfig{DiskPool: -1, DataDir: t.TempDir()})
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--disk-pool") {
		t.Fatalf("serve --disk-pool -1: %v, want a usage error naming --disk-pool", err)
	}
}
