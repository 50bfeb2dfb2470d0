package image

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Prune removes what no reference needs: image records no reference names,
// unpacked layers no image uses and for which inUse (if not nil) says
// false, and work directories left by processes that died. It returns the
// bytes of the layers it removed.
//
// Layers that a Resolve in this process is unpacking are safe. A caller
// that mounts layers must answer for them in inUse, from before it calls
// Resolve until it unmounts. Run Prune in one process per store only.
func (s *Store) Prune(ctx context.Context, inUse func(layerDir string) bool) (int64, error) {
	s.pruneTemp()
	refs, err := s.readRefs()
	if err != nil {
		return 0, err
	}
	named := make(map[string]bool)
	for _, r := range refs {
		named[r.Digest] = true
	}
	used := make(map[string]bool)
	images, _ := filepath.Glob(filepath.Join(s.dir, "images", "sha256", "*.json"))
	for _, p := range images {
		digest := "sha256:" + strings.TrimSuffix(filepath.Base(p), ".json")
		if !named[digest] && s.pins.ifUnpinned(imagePin(digest), func() { os.Remove(p) }) {
			continue
		}
		ir, err := s.readImage(digest)
		if err != nil {
			continue
		}
		for _, l := range ir.Layers {
			used[l] = true
		}
	}

	var freed int64
	ents, err := os.ReadDir(filepath.Join(s.dir, "layers", "sha256"))
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return freed, canceled(err)
		}
		if !e.IsDir() {
			continue
		}
		diffID := "sha256:" + e.Name()
		dir := filepath.Join(s.dir, "layers", "sha256", e.Name())
		if used[diffID] || (inUse != nil && inUse(dir)) {
			continue
		}
		size := s.readLayerSize(diffID)
		// Renamed away first so no one sees a half-removed layer.
		trash := filepath.Join(s.dir, "tmp", strconv.Itoa(os.Getpid())+"-prune-"+e.Name())
		var rerr error
		if !s.pins.ifUnpinned(diffID, func() { rerr = os.Rename(dir, trash) }) {
			continue
		}
		if rerr != nil {
			return freed, rerr
		}
		if err := os.RemoveAll(trash); err != nil {
			return freed, err
		}
		if err := os.Remove(dir + ".json"); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return freed, err
		}
		freed += size
	}
	return freed, nil
}

// pruneTemp removes work directories of processes that are gone.
func (s *Store) pruneTemp() {
	tmp := filepath.Join(s.dir, "tmp")
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range ents {
		pidStr, _, ok := strings.Cut(e.Name(), "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid == os.Getpid() {
			continue
		}
		if unix.Kill(pid, 0) == unix.ESRCH {
			removeTemp(filepath.Join(tmp, e.Name()))
		}
	}
}
