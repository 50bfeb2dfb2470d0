package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Collect deletes every manifest and chunk that no snapshot in live (and
// no manifest younger than the store's grace period, a capture whose
// digest its caller may not have recorded yet) needs, and returns the
// bytes freed. Chunks that a running capture has referenced are kept. A
// live manifest that cannot be read stops Collect before it deletes
// anything: it cannot tell what that snapshot needs.
func (s *Store) Collect(ctx context.Context, live []string) (freed int64, err error) {
	keep := map[string]bool{}
	for _, d := range live {
		hexd, err := parseDigest(d)
		if err != nil {
			return 0, err
		}
		keep[hexd] = true
	}
	s.collectMu.Lock()
	defer s.collectMu.Unlock()
	s.mu.Lock()
	s.collects++
	for p := range s.parents {
		keep[p] = true
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.collects--
		s.lingering = nil
		s.mu.Unlock()
	}()

	mfd, err := openDir(s.root, "manifests") // an offset of its own
	if err != nil {
		return 0, fmt.Errorf("collecting workspaces: %w", storeError(err))
	}
	names, err := readDir(mfd, 1<<62, make([]byte, 64<<10))
	unix.Close(mfd)
	if err != nil {
		return 0, fmt.Errorf("collecting workspaces: %w", storeError(err))
	}
	cutoff := time.Now().Add(-s.grace)
	var doomed []string
	for _, n := range names {
		var st unix.Stat_t
		if unix.Fstatat(s.manifests, n.name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		if keep[n.name] || time.Unix(st.Mtim.Unix()).After(cutoff) {
			keep[n.name] = true
			continue
		}
		doomed = append(doomed, n.name)
	}
	marked := map[[32]byte]struct{}{}
	for hexd := range keep {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if err := s.mark(hexd, marked); err != nil {
			return 0, fmt.Errorf("collecting workspaces: snapshot sha256:%s: %w", hexd, err)
		}
	}
	for _, n := range doomed {
		var st unix.Stat_t
		if unix.Fstatat(s.manifests, n, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && unix.Unlinkat(s.manifests, n, 0) == nil {
			freed += st.Size
		}
	}
	buf := make([]byte, 64<<10)
	for i := 0; i < 256; i++ {
		if err := ctx.Err(); err != nil {
			return freed, err
		}
		shard := fmt.Sprintf("%02x", i)
		fd, err := openDir(s.chunks, shard)
		if err != nil {
			continue
		}
		ents, err := readDir(fd, 1<<62, buf)
		for _, e := range ents {
			var sum [32]byte
			if b, err := hex.DecodeString(e.name); err != nil || len(b) != 32 {
				continue // not a chunk (a replacement being made)
			} else {
				copy(sum[:], b)
			}
			if _, ok := marked[sum]; ok {
				continue
			}
			freed += s.sweep(fd, e.name, sum)
		}
		unix.Close(fd)
	}
	return freed, nil
}

// sweep deletes the chunk name of the shard fd unless a capture has
// referenced it, deciding under the lock captures reference chunks under.
func (s *Store) sweep(fd int, name string, sum [32]byte) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for r := range s.running {
		if _, ok := r.m[sum]; ok {
			return 0
		}
	}
	for _, r := range s.lingering {
		if _, ok := r.m[sum]; ok {
			return 0
		}
	}
	var st unix.Stat_t
	if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || unix.Unlinkat(fd, name, 0) != nil {
		return 0
	}
	return st.Size
}

// mark adds the chunks the manifest hexd needs to marked. A manifest that
// is gone needs nothing.
func (s *Store) mark(hexd string, marked map[[32]byte]struct{}) error {
	f, err := s.openManifest(hexd)
	if err != nil {
		if os.IsNotExist(err) || isNotFound(err) {
			return nil
		}
		return err
	}
	defer f.Close()
	d, err := newDecoder(f, sha256.New(), 1<<62)
	if err != nil {
		return err
	}
	var e entry
	for {
		err := d.next(&e)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		for _, c := range e.chunks {
			marked[c.sum] = struct{}{}
		}
	}
}
