package workspace

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// A tree of many small files and a few big ones, about 20 MiB.
func workTree(t *testing.T, upper, seed string) {
	t.Helper()
	for i := 0; i < 200; i++ {
		writeFile(t, filepath.Join(upper, "src", string(rune('a'+i%26)), "f"+string(rune('0'+i/26))), pattern(seed+"small"+string(rune(i)), 500+i*37), 0o644)
	}
	for i := 0; i < 4; i++ {
		writeFile(t, filepath.Join(upper, "data", "big"+string(rune('0'+i))), pattern(seed+"big"+string(rune(i)), 5*ChunkSize), 0o644)
	}
}

// Dedup across sandboxes and captures: a second capture of a barely
// changed tree stores only the chunk that changed; another sandbox with
// the same files stores nothing new.
func TestSecondCaptureStoresOnlyWhatChanged(t *testing.T) {
	ctx := context.Background()
	s := store(t, "")
	a := disk(t, 128<<20)
	workTree(t, a, "same")
	first, err := s.Capture(ctx, a, CaptureOptions{})
	must(t, err)
	if first.StoredBytes != first.Bytes || first.Bytes < 20*ChunkSize {
		t.Fatalf("first capture %+v", first)
	}
	// One 4 KiB write in the middle of a big file, one small file edited.
	f, err := os.OpenFile(filepath.Join(a, "data/big2"), os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt(pattern("edit", 4096), 2*ChunkSize+100)
	must(t, err)
	must(t, f.Close())
	writeFile(t, filepath.Join(a, "src/c/f0"), []byte("edited"), 0o644)
	want := int64(ChunkSize + len("edited"))
	for _, parent := range []string{first.Digest, ""} {
		second, err := s.Capture(ctx, a, CaptureOptions{Parent: parent})
		must(t, err)
		if second.StoredBytes != want {
			t.Errorf("second capture (parent %q) stored %d bytes, want %d (one chunk and one small file)", parent, second.StoredBytes, want)
		}
		if second.Bytes != first.Bytes-int64(500+2*37)+int64(len("edited")) {
			t.Errorf("second capture %+v, first %+v", second, first)
		}
		dst := disk(t, 128<<20)
		must(t, s.Restore(ctx, second.Digest, dst, nil))
		sameTree(t, a, dst)
		want = 0 // the second time round it is all there
	}
	// Another sandbox, the same files: nothing new.
	b := disk(t, 128<<20)
	workTree(t, b, "same")
	other, err := s.Capture(ctx, b, CaptureOptions{})
	must(t, err)
	if other.StoredBytes != 0 {
		t.Errorf("a second sandbox with the same files stored %d bytes", other.StoredBytes)
	}
}

// With a parent, an unchanged file (same inode, size, times) is not read:
// its chunk, deleted from the store behind the parent's back, is not
// written again; a changed one is read.
func TestParentSkipsUnchangedFiles(t *testing.T) {
	ctx := context.Background()
	s, a := twoFiles(t)
	first, err := s.Capture(ctx, a, CaptureOptions{})
	must(t, err)
	second := changeOneSkipTheOther(t, s, a, first.Digest)
	// Without the parent it is read, and its chunk comes back.
	_, err = s.Capture(ctx, a, CaptureOptions{})
	must(t, err)
	var st unix.Stat_t
	if err := unix.Fstatat(s.chunks, chunkName(sha([]byte("unchanged content"))), &st, 0); err != nil {
		t.Fatalf("without a parent the file was not read: %v", err)
	}
	dst := disk(t, 64<<20)
	must(t, s.Restore(ctx, second.Digest, dst, nil))
	sameTree(t, a, dst)
	// A parent that is not there is ignored.
	if _, err := s.Capture(ctx, a, CaptureOptions{Parent: "sha256:1111111111111111111111111111111111111111111111111111111111111111"}); err != nil {
		t.Errorf("capture with a missing parent: %v", err)
	}
}

// After a restore, the next capture with RestoreAs's snapshot as parent
// reads only what changed: the restored files match it (this disk's
// inodes), where they do not match the snapshot restored.
func TestRestoreAsGivesTheNextCaptureAParent(t *testing.T) {
	ctx := context.Background()
	s, a := twoFiles(t)
	writeFile(t, filepath.Join(a, "links/x"), []byte("linked"), 0o644)
	must(t, os.Link(filepath.Join(a, "links/x"), filepath.Join(a, "links/y")))
	first, err := s.Capture(ctx, a, CaptureOptions{})
	must(t, err)
	b := disk(t, 64<<20)
	restored, err := s.RestoreAs(ctx, first.Digest, b, nil)
	must(t, err)
	if restored.Digest == first.Digest || restored.Files != first.Files || restored.Bytes != first.Bytes {
		t.Fatalf("RestoreAs = %+v, restored %+v", restored, first)
	}
	sameTree(t, a, b)
	// It is a snapshot of the same tree.
	c := disk(t, 64<<20)
	must(t, s.Restore(ctx, restored.Digest, c, nil))
	sameTree(t, a, c)
	changeOneSkipTheOther(t, s, b, restored.Digest)
}

// changeOneSkipTheOther changes upper's dir/changed, then captures upper
// with parent, checking that dir/same ("unchanged content") was not read:
// its chunk, deleted behind the store's back, is not written again.
func changeOneSkipTheOther(t *testing.T, s *Store, upper, parent string) Snapshot {
	t.Helper()
	writeFile(t, filepath.Join(upper, "dir/changed"), []byte("after!"), 0o644)
	sameSum := sha([]byte("unchanged content"))
	must(t, unix.Unlinkat(s.chunks, chunkName(sameSum), 0))
	next, err := s.Capture(context.Background(), upper, CaptureOptions{Parent: parent})
	must(t, err)
	var st unix.Stat_t
	if unix.Fstatat(s.chunks, chunkName(sameSum), &st, 0) == nil {
		t.Error("the capture read a file unchanged since its parent")
	}
	if next.StoredBytes != int64(len("after!")) {
		t.Errorf("the capture stored %d bytes, want the changed file's %d", next.StoredBytes, len("after!"))
	}
	return next
}

// twoFiles is a store and an upper layer holding dir/same and
// dir/changed (see changeOneSkipTheOther).
func twoFiles(t *testing.T) (*Store, string) {
	s := store(t, "")
	a := disk(t, 64<<20)
	writeFile(t, filepath.Join(a, "dir/same"), []byte("unchanged content"), 0o644)
	writeFile(t, filepath.Join(a, "dir/changed"), []byte("before"), 0o644)
	return s, a
}
