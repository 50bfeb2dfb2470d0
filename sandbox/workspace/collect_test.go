package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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

// Captures run at once, sharing chunks, while Collects run: each round
// the only manifest that needs the shared chunks is an old, dead one, so
// Collect deletes it and would delete its chunks too, which the captures
// are finding in the store and referencing. Every capture must restore.
func TestCollectRacingCaptures(t *testing.T) {
	ctx := context.Background()
	s := store(t, "")
	s.grace = time.Hour
	const n = 3
	uppers := make([]string, n)
	for i := range uppers {
		uppers[i] = disk(t, 128<<20)
		workTree(t, uppers[i], "shared")
	}
	base := disk(t, 128<<20)
	workTree(t, base, "shared")
	for round := 0; round < 4; round++ {
		old, err := s.Capture(ctx, base, CaptureOptions{})
		must(t, err)
		past := time.Now().Add(-2 * time.Hour)
		must(t, os.Chtimes(filepath.Join(s.dir, "manifests", strings.TrimPrefix(old.Digest, "sha256:")), past, past))
		// A fresh file in each upper, so every capture writes as well.
		for i, u := range uppers {
			writeFile(t, filepath.Join(u, "round"), pattern(fmt.Sprintf("r%d/%d", round, i), 2*ChunkSize), 0o644)
		}
		var wg sync.WaitGroup
		digests := make([]string, n)
		errs := make([]error, n+1)
		for i := range uppers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				snap, err := s.Capture(ctx, uppers[i], CaptureOptions{})
				digests[i], errs[i] = snap.Digest, err
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 3 && errs[n] == nil; k++ {
				_, errs[n] = s.Collect(ctx, nil)
			}
		}()
		wg.Wait()
		for _, err := range errs {
			must(t, err)
		}
		if _, err := s.Stat(ctx, old.Digest); err == nil {
			if _, err := s.Collect(ctx, digests); err != nil {
				t.Fatal(err)
			}
		}
		for i, d := range digests {
			dst := disk(t, 128<<20)
			if err := s.Restore(ctx, d, dst, nil); err != nil {
				t.Fatalf("round %d: capture %d does not restore: %v", round, i, err)
			}
			sameTree(t, uppers[i], dst)
		}
	}
}
