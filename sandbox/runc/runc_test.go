package runc_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/internal/testenv"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/oci"
	"github.com/reinsdev/reins/sandbox/runc"
	"github.com/reinsdev/reins/sandbox/sandboxtest"
)

func TestMain(m *testing.M) {
	oci.MaybeRunShim()
	goleak.VerifyTestMain(m)
}

func newBackend(t testing.TB, stateDir string) *runc.Backend {
	t.Helper()
	testenv.RequiresRoot(t)
	testenv.RequiresBinary(t, "runc", "runc")
	b, err := runc.New(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConformance(t *testing.T) {
	sandboxtest.Run(t, func(t *testing.T, stateDir string) sandbox.Backend {
		return newBackend(t, stateDir)
	}, sandboxtest.Capabilities{Isolation: true, Limits: true, Durable: true, Cgroups: true})
}

func TestMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := runc.New(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "install the Debian package runc") {
		t.Fatalf("New without runc in PATH: %v", err)
	}
}

// A shim binary that does not call oci.MaybeRunShim fails Start clearly
// and leaves nothing behind.
func TestShimWithoutHook(t *testing.T) {
	dir := t.TempDir()
	newBackend(t, dir) // the root and runc checks
	b, err := runc.New(dir, runc.WithShim("/bin/true"))
	if err != nil {
		t.Fatal(err)
	}
	rootfs := t.TempDir()
	sandboxtest.BusyboxRootfs(t, rootfs)
	id := sandboxtest.NewID("nohook")
	err = b.Start(context.Background(), sandbox.Bundle{ID: id, Rootfs: rootfs, Args: []string{"sleep", "10"}})
	if err == nil || !strings.Contains(err.Error(), "MaybeRunShim") {
		t.Fatalf("Start with a shim lacking the hook: %v", err)
	}
	if _, err := b.Status(context.Background(), id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Status after the failed Start = %v, want ErrNotFound", err)
	}
}
