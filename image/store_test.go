package image

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/reinsdev/reins/errdefs"
)

func TestListRemovePrune(t *testing.T) {
	reg := newTestRegistry(t)
	refA := reg.push(t, "test/a:1", testImage(t))
	refB := reg.push(t, "test/b:1", testImage(t, lowerLayer(t), tarBytes(t, tf{name: "b-only", body: "b"})))
	s := newStore(t)
	ctx := context.Background()
	a, err := s.Resolve(ctx, refA, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Resolve(ctx, refB, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Layers[0] != b.Layers[0] {
		t.Fatalf("the shared layer is not shared: %s %s", a.Layers[0], b.Layers[0])
	}

	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Ref != refA || list[1].Ref != refB || list[0].Digest != a.Digest ||
		list[0].Layers != 2 || list[0].Size != a.Size {
		t.Errorf("list = %+v", list)
	}

	// Nothing to prune while both are named.
	if freed, err := s.Prune(ctx, nil); err != nil || freed != 0 {
		t.Errorf("prune = %d, %v", freed, err)
	}

	if err := s.Remove(ctx, refA); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, refA); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second remove: %v", err)
	}
	if list, _ := s.List(ctx); len(list) != 1 || list[0].Ref != refB {
		t.Errorf("list after remove = %+v", list)
	}
	// A's own layer goes; the shared one stays for B.
	freed, err := s.Prune(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if freed <= 0 || exists(a.Layers[1]) || exists(a.Layers[1]+".json") || !exists(a.Layers[0]) || !exists(b.Layers[1]) {
		t.Errorf("prune freed %d; a's layer kept: %v, shared kept: %v", freed, exists(a.Layers[1]), exists(a.Layers[0]))
	}

	// A layer a sandbox still uses stays after its image is gone.
	if err := s.Remove(ctx, refB); err != nil {
		t.Fatal(err)
	}
	inUse := func(dir string) bool { return dir == b.Layers[1] }
	if _, err := s.Prune(ctx, inUse); err != nil {
		t.Fatal(err)
	}
	if !exists(b.Layers[1]) || exists(b.Layers[0]) {
		t.Errorf("in-use layer kept: %v, unused kept: %v", exists(b.Layers[1]), exists(b.Layers[0]))
	}
	if imgs, _ := filepath.Glob(filepath.Join(s.Dir(), "images", "sha256", "*")); len(imgs) != 0 {
		t.Errorf("image records left: %v", imgs)
	}

	// Resolving again pulls again, and by digest too.
	before, _ := reg.count()
	again, err := s.Resolve(ctx, reg.host+"/test/a@"+a.Digest, nil)
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := reg.count(); after == before || !slices.Equal(again.Layers, a.Layers) {
		t.Errorf("resolve after prune: %d requests, layers %v", after-before, again.Layers)
	}
}

func TestPruneRemovesDeadProcessesWork(t *testing.T) {
	s := newStore(t)
	dead := filepath.Join(s.Dir(), "tmp", "999999999-layer-123")
	mine := filepath.Join(s.Dir(), "tmp", "1-layer-456") // pid 1 is alive
	for _, d := range []string{dead, mine} {
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Prune(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if exists(dead) || !exists(mine) {
		t.Errorf("dead process's work kept: %v; live one's removed: %v", exists(dead), !exists(mine))
	}
}

func TestRefKeys(t *testing.T) {
	s := newStore(t)
	for ref, key := range map[string]string{
		"busybox":                            busyboxKey,
		"busybox:latest":                     busyboxKey,
		"debian":                             debianKey,
		"python:3.12-slim":                   "index.docker.io/library/python:3.12-slim",
		"docker.io/library/python:3.12-slim": "index.docker.io/library/python:3.12-slim",
		"ghcr.io/org/img:tag":                "ghcr.io/org/img:tag",
		"127.0.0.1:5000/x:y":                 "127.0.0.1:5000/x:y",
		"oci:/some/dir:v1":                   "oci:/some/dir:v1",
		"docker-archive:/a/b.tar":            "docker-archive:/a/b.tar",
	} {
		r, err := s.parseRef(ref)
		if err != nil || r.key != key {
			t.Errorf("parseRef(%q) = %v, %v; want key %q", ref, r, err, key)
		}
	}
	for _, bad := range []string{"", "UPPER/case", "a b"} {
		if _, err := s.parseRef(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("parseRef(%q): %v", bad, err)
		}
	}
}

// Two stores on one directory stand for two processes: their in-process
// locks do not see each other, and the first rename of a layer wins.
func TestTwoStoresRace(t *testing.T) {
	reg := newTestRegistry(t)
	ref := reg.push(t, "test/img:v1", testImage(t))
	dir := t.TempDir()
	stores := make([]*Store, 4)
	for i := range stores {
		s, err := NewStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.CloseIdleConnections)
		stores[i] = s
	}
	var wg sync.WaitGroup
	results := make([]*Image, len(stores))
	for i, s := range stores {
		wg.Go(func() {
			var err error
			if results[i], err = s.Resolve(context.Background(), ref, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, r := range results {
		if r == nil || !slices.Equal(r.Layers, results[0].Layers) {
			t.Fatalf("results differ: %+v", results)
		}
	}
	merged := mountOverlay(t, results[0].Layers)
	if got := readFile(t, filepath.Join(merged, "opq/new")); got != "new" {
		t.Errorf("opq/new = %q", got)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(ents) != 0 {
		t.Errorf("tmp not empty: %v", ents)
	}
}

func TestPlaceLayerLoserDiscards(t *testing.T) {
	s := newStore(t)
	diffID := "sha256:" + strings.Repeat("a", 64)
	dir, _ := s.layerDir(diffID)
	if err := os.MkdirAll(filepath.Join(dir, "winner"), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := s.tempDir("layer")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(tmp, "loser"), nil, 0o644)
	if err := s.placeLayer(tmp, dir, diffID, 1); err != nil {
		t.Fatal(err)
	}
	if !exists(filepath.Join(dir, "winner")) || exists(filepath.Join(dir, "loser")) {
		t.Errorf("the second rename replaced the first")
	}
}
