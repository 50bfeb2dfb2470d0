package manager

import (
	"context"
	"fmt"

	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/workspace"
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

// WorkspaceStore adapts a workspace.Store to Workspaces.
func WorkspaceStore(s *workspace.Store) Workspaces { return workspaceStore{s} }

type workspaceStore struct{ s *workspace.Store }

// PhaseWorkspace is the progress phase of a workspace's save or restore.
const PhaseWorkspace = "workspace"

func wsProgress(progress func(sandbox.Progress), what string) func(workspace.Progress) {
	if progress == nil {
		return nil
	}
	return func(p workspace.Progress) {
		progress(sandbox.Progress{Phase: PhaseWorkspace, Item: what, Done: p.Bytes, Total: p.TotalBytes,
			Message: fmt.Sprintf("%d files", p.Files)})
	}
}

func (w workspaceStore) Capture(ctx context.Context, upper, parent string, progress func(sandbox.Progress)) (Saved, error) {
	s, err := w.s.Capture(ctx, upper, workspace.CaptureOptions{Parent: parent, Progress: wsProgress(progress, "saving")})
	if err != nil {
		return Saved{}, err
	}
	return Saved{Digest: s.Digest, Files: s.Files, Bytes: s.Bytes, StoredBytes: s.StoredBytes, Skipped: s.Skipped}, nil
}

func (w workspaceStore) Restore(ctx context.Context, digest, upper string, progress func(sandbox.Progress)) error {
	return w.s.Restore(ctx, digest, upper, wsProgress(progress, "restoring"))
}

func (w workspaceStore) Collect(ctx context.Context, live []string) error {
	_, err := w.s.Collect(ctx, live)
	return err
}
