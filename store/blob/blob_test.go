package blob_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reinsdev/reins/store"
	"github.com/reinsdev/reins/store/blob"
	"github.com/reinsdev/reins/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	storetest.RunBlobs(t, func(t *testing.T) store.Blobs {
		b, err := blob.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

// A blob survives the Store that wrote it, and Open sweeps only stale
// leftovers of crashed Puts.
func TestReopenAndTempSweep(t *testing.T) {
	dir := t.TempDir()
	b, err := blob.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	d, _, err := b.Put(context.Background(), strings.NewReader("kept"))
	if err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "tmp", "put-stale")
	fresh := filepath.Join(dir, "tmp", "put-fresh")
	for _, p := range []string{stale, fresh} {
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-48 * time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}

	b, err = blob.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := b.Open(context.Background(), d)
	if err != nil {
		t.Fatalf("blob after reopen: %v", err)
	}
	rc.Close()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale temporary file survived Open: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("a fresh temporary file (a Put in progress?) was removed: %v", err)
	}
}

func TestOpenEmptyDir(t *testing.T) {
	if _, err := blob.Open(""); err == nil {
		t.Fatal("Open(\"\") succeeded")
	}
}
