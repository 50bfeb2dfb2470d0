package manager

import (
	"context"

	"github.com/reinsdev/reins/sandbox"
)

// Workspaces saves sandboxes' upper layers and writes them back
// (sandbox/workspace's Store, through WorkspaceStore). Without one the
// manager keeps a suspended sandbox's disk instead, and cannot snapshot
// or fork.
type Workspaces interface {
	// Capture saves the upper layer at upper (read through descriptors,
	// never following a link), reusing what parent (a digest, or "")
	// already holds.
	Capture(ctx context.Context, upper, parent string, progress func(sandbox.Progress)) (Saved, error)
	// Restore writes the workspace digest into upper, an empty directory
	// on a fresh disk, before the overlay is mounted.
	Restore(ctx context.Context, digest, upper string, progress func(sandbox.Progress)) error
	// Collect deletes what no digest in live needs.
	Collect(ctx context.Context, live []string) error
}

// Saved is what a Capture saved.
type Saved struct {
	Digest      string
	Files       int64 // entries: files, directories, links
	Bytes       int64 // their content
	StoredBytes int64 // content the store did not have before
	Skipped     int64 // entries that cannot be saved (sockets, fifos)
}
