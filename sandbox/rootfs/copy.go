package rootfs

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// CopyDisk copies the disk image of from (unmounted) to a new disk image
// of to, keeping it sparse: only its data extents are read and written
// (SEEK_DATA/SEEK_HOLE), so a 4 GiB disk holding 30 MiB costs 30 MiB.
// Both are the service's own files. A partial copy is removed.
func CopyDisk(from, to Layout) (err error) {
	src, err := os.Open(from.DiskImage())
	if err != nil {
		return err
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(to.Dir, 0o700); err != nil {
		return err
	}
	dst, err := os.OpenFile(to.DiskImage(), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(to.DiskImage())
		}
	}()
	if err := dst.Truncate(fi.Size()); err != nil {
		return fmt.Errorf("sizing the disk copy: %w", err)
	}
	fd := int(src.Fd())
	for off := int64(0); off < fi.Size(); {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return fmt.Errorf("copying the disk: %w", err)
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("copying the disk: %w", err)
		}
		if _, err := dst.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := io.Copy(dst, io.NewSectionReader(src, data, hole-data)); err != nil {
			return fmt.Errorf("copying the disk: %w", err)
		}
		off = hole
	}
	return dst.Sync()
}
