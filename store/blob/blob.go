// Package blob is a store.Blobs in a directory of files named by their
// sha256 digest:
//
//	DIR/sha256/ab/abcdef…   one blob, read-only once written
//	DIR/tmp/put-…           a Put in progress
//
// Put streams its input to a temporary file while hashing it, fsyncs it and
// renames it into place, so a blob is either whole or absent, even across a
// crash, and memory does not grow with a blob's size. Writing the same
// content twice stores it once.
package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/store"
)

var _ store.Blobs = (*Store)(nil)

const prefix = "sha256:"

// staleTemp is the age past which Open deletes a leftover temporary file:
// older than any Put could take, so never one still being written.
const staleTemp = 24 * time.Hour

// Store is a store.Blobs in a directory. It is safe for concurrent use, also
// by several processes sharing the directory.
type Store struct {
	dir string
}

// Open opens the blob store in dir, creating it (mode 0700: blobs may hold
// tool output with private data) if need be, and deletes temporary files
// that crashed Puts left behind.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, fmt.Errorf("open blob store: empty directory: %w", errdefs.ErrInvalidArgument)
	}
	for _, d := range []string{dir, filepath.Join(dir, "sha256"), filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("open blob store: %w", fsErr(err))
		}
	}
	s := &Store{dir: dir}
	s.removeStaleTemps()
	return s, nil
}

func (s *Store) removeStaleTemps() {
	tmp := filepath.Join(s.dir, "tmp")
	entries, _ := os.ReadDir(tmp)
	for _, e := range entries {
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > staleTemp {
			os.Remove(filepath.Join(tmp, e.Name()))
		}
	}
}

// Put stores everything r yields and returns its digest ("sha256:" and 64
// lowercase hex digits) and size. When Put returns, the blob is on stable
// storage, so an event that references it may be appended.
func (s *Store) Put(ctx context.Context, r io.Reader) (digest string, size int64, err error) {
	f, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "put-")
	if err != nil {
		return "", 0, fmt.Errorf("put blob: %w", fsErr(err))
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	h := sha256.New()
	size, err = io.Copy(io.MultiWriter(f, h), ctxReader{ctx, r})
	if err != nil {
		return "", 0, fmt.Errorf("put blob: %w", fsErr(err))
	}
	if err := f.Chmod(0o400); err != nil {
		return "", 0, fmt.Errorf("put blob: %w", fsErr(err))
	}
	if err := f.Sync(); err != nil {
		return "", 0, fmt.Errorf("put blob: %w", fsErr(err))
	}
	if err := f.Close(); err != nil {
		return "", 0, fmt.Errorf("put blob: %w", fsErr(err))
	}
	hexd := hex.EncodeToString(h.Sum(nil))
	shard := filepath.Join(s.dir, "sha256", hexd[:2])
	if err := os.Mkdir(shard, 0o700); err == nil {
		// A new shard is durable only once its parent is.
		if err := syncDir(filepath.Dir(shard)); err != nil {
			return "", 0, fmt.Errorf("put blob: %w", fsErr(err))
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return "", 0, fmt.Errorf("put blob: %w", fsErr(err))
	}
	// Renaming over an existing copy is harmless (same bytes) and spares a
	// check that would race with another Put of the same content.
	if err := os.Rename(f.Name(), filepath.Join(shard, hexd)); err != nil {
		return "", 0, fmt.Errorf("put blob: %w", fsErr(err))
	}
	// The rename is durable only once its directory is.
	if err := syncDir(shard); err != nil {
		return "", 0, fmt.Errorf("put blob: %w", fsErr(err))
	}
	return prefix + hexd, size, nil
}

// Open returns the blob with the given digest. A digest that is not
// "sha256:" and 64 lowercase hex digits is errdefs.ErrInvalidArgument; one
// not stored is errdefs.ErrNotFound.
func (s *Store) Open(ctx context.Context, digest string) (io.ReadCloser, error) {
	hexd, err := parse(digest)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(s.dir, "sha256", hexd[:2], hexd))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("blob %s: %w", digest, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("open blob %s: %w", digest, fsErr(err))
	}
	return f, nil
}

// parse returns the hex part of a well-formed digest. It is also what keeps
// a digest from naming a path outside the store.
func parse(digest string) (string, error) {
	hexd, ok := strings.CutPrefix(digest, prefix)
	if !ok || len(hexd) != 2*sha256.Size || strings.ToLower(hexd) != hexd {
		return "", fmt.Errorf("blob digest %q: want %s and %d lowercase hex digits: %w",
			digest, prefix, 2*sha256.Size, errdefs.ErrInvalidArgument)
	}
	if _, err := hex.DecodeString(hexd); err != nil {
		return "", fmt.Errorf("blob digest %q: want %s and %d lowercase hex digits: %w",
			digest, prefix, 2*sha256.Size, errdefs.ErrInvalidArgument)
	}
	return hexd, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// fsErr gives a file system error its kind where it has an obvious one.
func fsErr(err error) error {
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("%w (%w)", err, errdefs.ErrNoSpace)
	}
	return err
}

// ctxReader ends a Put once its context is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
