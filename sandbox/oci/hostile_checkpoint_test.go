package oci

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// A restore whose checkpoint image is gone says so, and its words reach
// the sandbox's owner without the image's host path (trust rule 2: the
// path must stay in the error's chain, where the API takes it out).
func TestHostileRestoreWithoutImageNamesNoHostPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sandboxes", "sb_x", "checkpoint")
	_, err := (&Runtime{}).RestoreFrom(context.Background(), sandbox.Bundle{ID: "sb_x"}, dir)
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("restore without an image: %v; want not found", err)
	}
	if msg := errdefs.Public(err); strings.Contains(msg, dir) {
		t.Errorf("the owner reads a host path: %q", msg)
	}
}
