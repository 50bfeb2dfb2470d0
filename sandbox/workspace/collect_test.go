package workspace

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/reinsdev/reins/errdefs"
	"golang.org/x/sys/unix"
)

func TestCollectKeepsOnlyWhatLiveSnapshotsNeed(t *testing.T) {
	ctx := context.Background()
	s := store(t, "")
	a := disk(t, 64<<20)
	writeFile(t, filepath.Join(a, "shared"), pattern("shared", 3000), 0o644)
	writeFile(t, filepath.Join(a, "only-a"), pattern("a", 5000), 0o644)
	snapA, err := s.Capture(ctx, a, CaptureOptions{})
	must(t, err)
	b := disk(t, 64<<20)
	writeFile(t, filepath.Join(b, "shared"), pattern("shared", 3000), 0o644)
	writeFile(t, filepath.Join(b, "only-b"), pattern("b", 7000), 0o644)
	snapB, err := s.Capture(ctx, b, CaptureOptions{})
	must(t, err)

	freed, err := s.Collect(ctx, []string{snapB.Digest})
	must(t, err)
	if freed < 5000 {
		t.Errorf("freed %d bytes, want at least only-a's 5000", freed)
	}
	if _, err := s.Stat(ctx, snapA.Digest); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("A's manifest survived: %v", err)
	}
	var st unix.Stat_t
	if unix.Fstatat(s.chunks, chunkName(sha(pattern("a", 5000))), &st, 0) == nil {
		t.Error("a chunk only A needed survived")
	}
	dst := disk(t, 64<<20)
	must(t, s.Restore(ctx, snapB.Digest, dst, nil))
	sameTree(t, b, dst)

	// Within the grace period a manifest no one named live is kept.
	s.grace = defaultGrace
	snapA, err = s.Capture(ctx, a, CaptureOptions{})
	must(t, err)
	if _, err := s.Collect(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(ctx, snapA.Digest); err != nil {
		t.Errorf("a fresh manifest was collected inside the grace period: %v", err)
	}
	s.grace = 0
	if _, err := s.Collect(ctx, nil); err != nil {
		t.Fatal(err)
	}
	ents, err := readDir(s.manifests, 100, make([]byte, 4096))
	must(t, err)
	if len(ents) != 0 {
		t.Errorf("manifests left after collecting everything: %v", ents)
	}
	if _, err := s.Collect(ctx, []string{"nonsense"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Collect of a malformed digest: %v", err)
	}
}
