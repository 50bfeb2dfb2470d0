package image

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/reinsdev/reins/errdefs"
)

// layerSource is one layer to unpack.
type layerSource struct {
	diffID string // digest of the uncompressed tar: the layer's name in the store
	digest string // digest of what open returns if it is compressed, else ""
	size   int64  // bytes open returns, 0 if unknown; for progress
	phase  string
	open   func() (io.ReadCloser, error)
}

// ensureLayer makes sure the layer is unpacked in the store, unpacking it
// if no one has, and returns its directory and uncompressed size.
func (s *Store) ensureLayer(ctx context.Context, src layerSource, report func(Progress)) (string, int64, error) {
	dir, err := s.layerDir(src.diffID)
	if err != nil {
		return "", 0, err
	}
	present := func() bool {
		fi, err := os.Stat(dir)
		return err == nil && fi.IsDir()
	}
	reportPresent := func() {
		report(Progress{Phase: src.phase, Layer: cmp.Or(src.digest, src.diffID), Done: src.size, Total: src.size, Message: "already present"})
	}
	if present() {
		reportPresent()
		return dir, s.readLayerSize(src.diffID), nil
	}
	unlock, err := s.layerLocks.lock(ctx, src.diffID)
	if err != nil {
		return "", 0, canceled(err)
	}
	defer unlock()
	if present() { // unpacked while we waited
		reportPresent()
		return dir, s.readLayerSize(src.diffID), nil
	}

	start := time.Now()
	tmp, err := s.tempDir("layer")
	if err != nil {
		return "", 0, err
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	size, err := unpackVerified(ctx, src, tmp, report)
	if err != nil {
		var se *sourceError
		switch {
		case errors.Is(err, syscall.ENOSPC):
			err = fmt.Errorf("%w (%w)", errdefs.ErrNoSpace, err)
		case errdefs.Kind(err) == nil && !errors.As(err, &se):
			err = fmt.Errorf("%w: %w", errdefs.ErrInternal, err)
		}
		return "", 0, fmt.Errorf("layer %s: %w", src.diffID, err)
	}
	if err := s.placeLayer(tmp, dir, src.diffID, size); err != nil {
		return "", 0, err
	}
	s.log.Debug("layer unpacked", "layer", src.diffID, "bytes", size, "duration", time.Since(start))
	return dir, size, nil
}

// placeLayer records an unpacked layer's size and renames its temporary
// directory into place. If another process placed the same layer first,
// theirs stays and ours is discarded by the caller.
func (s *Store) placeLayer(tmp, dir, diffID string, size int64) error {
	if err := s.writeJSON(dir+".json", &layerRecord{Version: recordVersion, DiffID: diffID, Size: size}); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if fi, serr := os.Stat(dir); serr == nil && fi.IsDir() {
			return nil
		}
		return fmt.Errorf("layer %s: %w", diffID, err)
	}
	return nil
}

// tempDir makes a directory under DIR/tmp named after this process, so
// that Prune can tell whose it is.
func (s *Store) tempDir(kind string) (string, error) {
	d, err := os.MkdirTemp(filepath.Join(s.dir, "tmp"), fmt.Sprintf("%d-%s-", os.Getpid(), kind))
	if err != nil {
		return "", err
	}
	// The layer's root directory is the root of the merged view.
	if err := os.Chmod(d, 0o755); err != nil {
		os.RemoveAll(d)
		return "", err
	}
	return d, nil
}

// unpackVerified streams the layer into dir, checking both digests, and
// returns the size of the uncompressed tar.
func unpackVerified(ctx context.Context, src layerSource, dir string, report func(Progress)) (int64, error) {
	rc, err := src.open()
	if err != nil {
		return 0, &sourceError{err}
	}
	defer rc.Close()
	var r io.Reader = &progressReader{
		ctx: ctx, r: rc, report: report,
		p: Progress{Phase: src.phase, Layer: cmp.Or(src.digest, src.diffID), Total: src.size},
	}
	var blobHash hash.Hash
	tarStream := r
	if src.digest != "" {
		blobHash = sha256.New()
		r = io.TeeReader(r, blobHash)
		dec, err := decompress(r)
		if err != nil {
			return 0, err
		}
		defer dec.Close()
		tarStream = dec
	}
	diffHash := sha256.New()
	n := &countWriter{}
	tarStream = io.TeeReader(tarStream, io.MultiWriter(diffHash, n))
	if err := unpackTar(tarStream, dir); err != nil {
		return 0, err
	}
	// The digests cover the padding after the tar's end, too.
	if _, err := io.Copy(io.Discard, tarStream); err != nil {
		return 0, err
	}
	if err := checkDigest("uncompressed layer", diffHash, src.diffID); err != nil {
		return 0, err
	}
	if blobHash != nil {
		if _, err := io.Copy(io.Discard, r); err != nil {
			return 0, err
		}
		if err := checkDigest("layer blob", blobHash, src.digest); err != nil {
			return 0, err
		}
	}
	return n.n, nil
}

func checkDigest(what string, h hash.Hash, want string) error {
	got := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if got != want {
		return fmt.Errorf("%s has digest %s, want %s: %w", what, got, want, errdefs.ErrInvalidArgument)
	}
	return nil
}

var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// decompress returns the uncompressed stream of a layer blob, recognizing
// gzip and zstd by their magic numbers; anything else is taken as a tar.
func decompress(r io.Reader) (io.ReadCloser, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, _ := br.Peek(4) // a short or empty blob is left to the tar reader
	switch {
	case bytes.HasPrefix(magic, gzipMagic):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		return zr, nil
	case bytes.HasPrefix(magic, zstdMagic):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		return zr.IOReadCloser(), nil
	}
	return io.NopCloser(br), nil
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

// progressReader reports bytes read every progressStep and at the end,
// and stops when ctx is done.
type progressReader struct {
	ctx    context.Context
	r      io.Reader
	report func(Progress)
	p      Progress
	last   int64
}

const progressStep = 1 << 20

func (p *progressReader) Read(b []byte) (int, error) {
	if err := p.ctx.Err(); err != nil {
		return 0, canceled(err)
	}
	n, err := p.r.Read(b)
	if err != nil && err != io.EOF {
		err = &sourceError{err}
	}
	p.p.Done += int64(n)
	if p.p.Done-p.last >= progressStep || (err == io.EOF && p.p.Done != p.last) {
		p.last = p.p.Done
		p.report(p.p)
	}
	return n, err
}

// sourceError marks a failure to read a layer from where it comes from (a
// registry, a file), as against one to write it out.
type sourceError struct{ err error }

func (e *sourceError) Error() string { return e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }
