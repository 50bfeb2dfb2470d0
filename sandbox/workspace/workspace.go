// Package workspace saves a sandbox's workspace, the overlay's upper layer
// on its disk (DIR/disk/upper: everything the sandbox wrote over its
// image, overlayfs whiteouts and opaque directories included), into a
// content-addressed, deduplicated store, and writes it back into a fresh
// disk's upper layer.
//
// Layout of a store directory (DATA/workspaces, mode 0700):
//
//	DIR/chunks/ab/abcdef…   one chunk of file content, named by its sha256
//	DIR/manifests/abcdef…   one snapshot's manifest, named by its sha256
//	DIR/tmp/…               replacements of damaged chunks (emptied by Open)
//
// A snapshot is a manifest (format.go: the tree in walk order, every
// entry's metadata, and each file's chunks) whose digest names it. File
// content is cut on a fixed grid of ChunkSize bytes, so a file that
// changes in one place stores one new chunk, and identical content is
// stored once across every sandbox (docs/decisions/0033-ws-workspace-format.md).
//
// Everything in an upper layer was written by the sandbox and is hostile:
// names, links, sizes and types may change under the walk. Capture reaches
// every entry from a descriptor of its directory, one component at a time,
// never following a link, opens only what the directory says is a file or
// a directory (O_NOFOLLOW|O_NONBLOCK) and believes only fstat of what it
// opened. Restore treats a manifest the same way: every name is one
// component, checked, and made with an *at call on its parent's
// descriptor in an empty directory; hard links may only point at a file
// the same restore made; chunks must hash to their names and fit the grid
// and the file's size; counts, names, depth and bytes are bounded.
// Sockets, fifos and device nodes other than overlay whiteouts are never
// captured (Snapshot.Skipped counts them) and so never restored.
//
// Durability and failure: a chunk is written in place under its name
// with O_EXCL (a short one, being written or cut short by a crash, is
// waited for or replaced whole); a capture syncs the store's filesystem once, then links its
// manifest in last, so a failed or interrupted capture leaves no manifest,
// only chunks that Collect deletes. A full store disk is
// errdefs.ErrResourceExhausted.
//
// Concurrency: captures and restores of many sandboxes run at once and
// may share chunks. Collect never deletes a chunk a running capture has
// referenced (each capture registers its references while it runs), nor
// a manifest younger than a grace period (a capture that finished but
// whose caller has not yet recorded its digest as live).
package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/errdefs"
)

// ChunkSize is the grid file content is cut on.
const ChunkSize = 1 << 20

// Bounds of a snapshot, in both directions.
const (
	// DefaultMaxEntries caps the entries of a snapshot (files,
	// directories, links); as many as an extraction takes.
	DefaultMaxEntries = 4 << 20
	// MaxDepth caps how deep directories nest: each level holds a
	// descriptor while it is walked.
	MaxDepth = 512
	maxName  = 255  // NAME_MAX
	maxPath  = 4095 // PATH_MAX less the NUL: symbolic link targets
	// maxFileChunks caps one file's chunks (1 TiB of data).
	maxFileChunks = 1 << 20
	// xattr bounds per entry (the kernel's XATTR_SIZE_MAX per value).
	maxXattrs     = 1024
	maxXattrValue = 64 << 10
	maxXattrTotal = 1 << 20
)

// Snapshot describes a captured workspace.
type Snapshot struct {
	Digest string // "sha256:…" of the manifest
	// Files counts the entries that are not directories (files, hard
	// links, symbolic links, whiteouts); Bytes their content.
	Files, Bytes int64
	// StoredBytes is the content the capture added to the store; the rest
	// was there already (deduplicated). Only Capture reports it.
	StoredBytes int64
	// Skipped counts the sockets, fifos and device nodes not captured.
	Skipped int64
}

// Progress reports how far a capture or a restore has got.
type Progress struct {
	Files, Bytes int64
	TotalBytes   int64 // 0 when unknown
}

// CaptureOptions says how to capture.
type CaptureOptions struct {
	// Parent is the digest of an earlier snapshot of the same upper
	// layer: a file whose inode, size, modification and change times
	// match its entry there is not read again. A parent that is missing
	// or unreadable is ignored.
	Parent string
	// Progress, if set, is called now and then from one goroutine.
	Progress func(Progress)
	// MaxBytes caps the content captured; 0 means the size of the upper
	// layer's filesystem (the sandbox's disk), a negative value no cap.
	MaxBytes int64
	// MaxEntries caps the entries; 0 means DefaultMaxEntries.
	MaxEntries int64
}

// Store is a workspace store in a directory. It is safe for concurrent
// use, by one process.
type Store struct {
	dir       string
	root      int // descriptors of dir, DIR/chunks, DIR/manifests, DIR/tmp
	chunks    int
	manifests int
	tmp       int
	seq       atomic.Int64  // names temporary files
	grace     time.Duration // Collect keeps manifests younger than this

	collectMu sync.Mutex // one Collect at a time
	mu        sync.Mutex // guards what follows
	running   map[*refs]struct{}
	lingering []*refs // of captures that ended during a Collect
	parents   map[string]int
	collects  int // Collects running (0 or 1)
}

// refs is the set of chunks one capture has referenced.
type refs struct{ m map[[32]byte]struct{} }

// defaultGrace is how long a finished capture's manifest is kept by
// Collect before its digest must be among the live ones.
const defaultGrace = 15 * time.Minute

// Open opens the store in dir, making it (mode 0700: workspaces hold the
// sandboxes' files) if need be.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, fmt.Errorf("open workspace store: empty directory: %w", errdefs.ErrInvalidArgument)
	}
	// What a crashed capture left being written is garbage: one process
	// serves a data directory.
	if err := os.RemoveAll(filepath.Join(dir, "tmp")); err != nil {
		return nil, fmt.Errorf("open workspace store: %w", storeError(err))
	}
	for _, d := range []string{dir, filepath.Join(dir, "chunks"), filepath.Join(dir, "manifests"), filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("open workspace store: %w", storeError(err))
		}
	}
	s := &Store{dir: dir, grace: defaultGrace, root: -1, chunks: -1, manifests: -1, tmp: -1,
		running: map[*refs]struct{}{}, parents: map[string]int{}}
	var err error
	if s.root, err = openDir(unix.AT_FDCWD, dir); err == nil {
		if s.chunks, err = openDir(s.root, "chunks"); err == nil {
			if s.manifests, err = openDir(s.root, "manifests"); err == nil {
				s.tmp, err = openDir(s.root, "tmp")
			}
		}
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("open workspace store: %w", storeError(err))
	}
	for i := 0; i < 256; i++ {
		if err := unix.Mkdirat(s.chunks, fmt.Sprintf("%02x", i), 0o700); err != nil && err != unix.EEXIST {
			s.Close()
			return nil, fmt.Errorf("open workspace store: %w", storeError(err))
		}
	}
	return s, nil
}

// Close releases the store's descriptors.
func (s *Store) Close() error {
	for _, fd := range []int{s.tmp, s.manifests, s.chunks, s.root} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	s.root, s.chunks, s.manifests, s.tmp = -1, -1, -1, -1
	return nil
}

func openDir(at int, name string) (int, error) {
	return unix.Openat(at, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// Stat describes the snapshot digest from its manifest's trailer. Its
// StoredBytes is 0: which capture added which chunk is not kept (it
// would make two captures of the same tree two snapshots).
func (s *Store) Stat(ctx context.Context, digest string) (Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return Snapshot{}, err
	}
	_, f, t, err := s.manifest(digest)
	if err != nil {
		return Snapshot{}, err
	}
	f.Close()
	return Snapshot{Digest: digest, Files: t.files, Bytes: t.bytes, Skipped: t.skipped}, nil
}

// manifest opens the manifest of digest and reads its trailer.
func (s *Store) manifest(digest string) (hexd string, f *os.File, t trailer, err error) {
	if hexd, err = parseDigest(digest); err != nil {
		return "", nil, t, err
	}
	if f, err = s.openManifest(hexd); err != nil {
		return "", nil, t, err
	}
	if t, err = readTrailer(f); err != nil {
		f.Close()
		return "", nil, t, fmt.Errorf("workspace snapshot %s: %w", digest, err)
	}
	return hexd, f, t, nil
}

func (s *Store) openManifest(hexd string) (*os.File, error) {
	fd, err := unix.Openat(s.manifests, hexd, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT {
		return nil, fmt.Errorf("workspace snapshot sha256:%s: %w", hexd, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("workspace snapshot sha256:%s: %w", hexd, storeError(err))
	}
	return os.NewFile(uintptr(fd), "manifest"), nil
}

const digestPrefix = "sha256:"

// parseDigest returns the hex part of a well-formed digest; it is also
// what keeps a digest from naming a path.
func parseDigest(digest string) (string, error) {
	hexd, ok := strings.CutPrefix(digest, digestPrefix)
	if ok && len(hexd) == 2*sha256.Size && strings.ToLower(hexd) == hexd {
		if _, err := hex.DecodeString(hexd); err == nil {
			return hexd, nil
		}
	}
	return "", fmt.Errorf("workspace snapshot digest %q: want %s and %d lowercase hex digits: %w",
		digest, digestPrefix, 2*sha256.Size, errdefs.ErrInvalidArgument)
}

// storeError gives an error of the store's own disk its kind. The text
// names no host path: it may reach a tenant.
func storeError(err error) error {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return errdefs.WithMessage(errdefs.ErrResourceExhausted,
			"the workspace store is full (no space left on its disk): delete snapshots no longer needed, or give the service more disk")
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("workspace store: %s: %w", pe.Op, pe.Err)
	}
	return err
}

// begin registers a capture (and the parent it reads) with the store, so
// that Collect keeps what it references. It reports whether a Collect is
// running, which may already have judged the parent's chunks.
func (s *Store) begin(parent string) (*refs, bool) {
	r := &refs{m: map[[32]byte]struct{}{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running[r] = struct{}{}
	if parent != "" {
		s.parents[parent]++
	}
	return r, s.collects > 0
}

// end unregisters a capture. During a Collect its references linger until
// the Collect ends: its manifest, new to the Collect, needs them.
func (s *Store) end(r *refs, parent string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.running, r)
	if parent != "" {
		if s.parents[parent]--; s.parents[parent] <= 0 {
			delete(s.parents, parent)
		}
	}
	if s.collects > 0 {
		s.lingering = append(s.lingering, r)
	}
}

// ref records that the capture r references chunk d. It must be called
// before the capture relies on the chunk being there.
func (s *Store) ref(r *refs, d [32]byte) {
	s.mu.Lock()
	r.m[d] = struct{}{}
	s.mu.Unlock()
}

func isNotFound(err error) bool { return errors.Is(err, errdefs.ErrNotFound) }
