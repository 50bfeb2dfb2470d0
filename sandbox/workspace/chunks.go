package workspace

import (
	"encoding/hex"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/errdefs"
)

// chunkName is a chunk's path below DIR/chunks.
func chunkName(sum [32]byte) string {
	h := hex.EncodeToString(sum[:])
	return h[:2] + "/" + h
}

// putChunk stores data, whose sha256 is sum, unless a whole copy is there
// already; it reports whether it wrote one (durable once the capture
// syncs the store's filesystem).
func (s *Store) putChunk(sum [32]byte, data []byte) (bool, error) {
	name := chunkName(sum)
	var st unix.Stat_t
	if err := unix.Fstatat(s.chunks, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Size == int64(len(data)) {
		return false, nil
	}
	// Written in place under its name (one new directory entry, where a
	// temporary name and a rename cost three), with O_EXCL: one writer
	// per name. A name whose size is short is a chunk another capture is
	// still writing (a write grows the size only as it copies), or one a
	// crash cut short: wait for it a little, then replace it whole.
	fd, err := unix.Openat(s.chunks, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o400)
	if err == unix.EEXIST {
		for i := 0; i < 50; i++ {
			if unix.Fstatat(s.chunks, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Size == int64(len(data)) {
				return false, nil
			}
			time.Sleep(2 * time.Millisecond)
		}
		return s.replaceChunk(name, sum, data)
	}
	if err != nil {
		return false, storeError(err)
	}
	if err := writeAll(fd, data); err != nil {
		unix.Close(fd)
		unix.Unlinkat(s.chunks, name, 0)
		return false, storeError(err)
	}
	if err := unix.Close(fd); err != nil {
		unix.Unlinkat(s.chunks, name, 0)
		return false, storeError(err)
	}
	return true, nil
}

// replaceChunk writes data under a temporary name and renames it over
// name, a damaged copy.
func (s *Store) replaceChunk(name string, sum [32]byte, data []byte) (bool, error) {
	tmp := fmt.Sprintf("%x.%d", sum[:8], s.seq.Add(1))
	fd, err := unix.Openat(s.tmp, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o400)
	if err != nil {
		return false, storeError(err)
	}
	err = writeAll(fd, data)
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(s.tmp, tmp, s.chunks, name)
	}
	if err != nil {
		unix.Unlinkat(s.tmp, tmp, 0)
		return false, storeError(err)
	}
	return true, nil
}

// readChunk reads the chunk c into buf (of at least c.n bytes) and checks
// that it is whole and hashes to its name.
func (s *Store) readChunk(c chunkRef, buf []byte) ([]byte, error) {
	fd, err := unix.Openat(s.chunks, chunkName(c.sum), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT {
		return nil, errdefs.WithMessage(errdefs.ErrNotFound, fmt.Sprintf("its chunk sha256:%x is missing from the workspace store", c.sum))
	}
	if err != nil {
		return nil, storeError(err)
	}
	defer unix.Close(fd)
	b := buf[:c.n]
	for off := 0; off < len(b); {
		n, err := unix.Pread(fd, b[off:], int64(off))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, storeError(err)
		}
		if n == 0 {
			return nil, chunkDamaged(c)
		}
		off += n
	}
	var one [1]byte
	if n, _ := unix.Pread(fd, one[:], c.n); n != 0 {
		return nil, chunkDamaged(c)
	}
	if sha(b) != c.sum {
		return nil, chunkDamaged(c)
	}
	return b, nil
}

func chunkDamaged(c chunkRef) error {
	return errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf(
		"its chunk sha256:%x in the workspace store is damaged (its bytes do not match its digest or its length %d)", c.sum, c.n))
}

func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}
