package manager

import (
	"context"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/fake"
)

// failingStart is a backend that makes its own root (so the test needs
// no mounts) and whose every start fails on a host path, as a fork's copy
// of its source's disk, or a template's warm-up, can.
type failingStart struct {
	*fake.Backend
	path string
}

func (failingStart) MakesRoot() {}

func (f failingStart) Start(context.Context, sandbox.Bundle) (sandbox.Endpoint, error) {
	return sandbox.Endpoint{}, &fs.PathError{Op: "open", Path: f.path, Err: syscall.ENOSPC}
}

// A create that fails leaves a stopped record its tenant reads (Get, ls):
// its message says why without the host path of the error's chain
// (trust rule 2; the API's error is redacted, the record was not).
func TestHostileFailedCreateRecordNamesNoHostPath(t *testing.T) {
	dir := t.TempDir()
	host := filepath.Join(dir, "sandboxes", "sb_x", "disk.img")
	m := realManager(t, dir, "/bin/true", "fake", failingStart{fake.New(), host})
	info, err := m.Create(context.Background(), "acme", sandbox.Spec{Image: "busybox"}, nil)
	if err == nil {
		t.Fatal("the create succeeded")
	}
	if info.ID == "" {
		t.Fatalf("the failed create left no record to read (the test reads its message): %v", err)
	}
	got, gerr := m.Get(context.Background(), "acme", info.ID)
	if gerr != nil {
		t.Fatal(gerr)
	}
	if got.State != sandbox.StateStopped || !strings.Contains(got.Message, "no space left on device") {
		t.Errorf("record %s %s %q; want stopped, saying why", got.State, got.Reason, got.Message)
	}
	if strings.Contains(got.Message, dir) {
		t.Errorf("the record's message names a host path: %q", got.Message)
	}
}
