package archive

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/reinsdev/reins/errdefs"
)

// Write writes a tar stream of src, a file or a directory, to w. Entries are
// named after src's base name ("dir/", "dir/a.txt"; or "file.txt"), the way
// `tar -C parent base` names them. A symbolic link given as src is followed;
// symbolic links inside a directory are stored as links. Sockets, fifos and
// devices inside a directory are skipped.
func Write(w io.Writer, src string) error {
	src, err := filepath.Abs(src) // "." is named after the directory it is
	if err != nil {
		return osError(src, err)
	}
	resolved, err := filepath.EvalSymlinks(src)
	if err != nil {
		return osError(src, err)
	}
	prefix := filepath.Base(src)
	if resolved == "/" {
		root, err := os.OpenRoot("/")
		if err != nil {
			return osError(src, err)
		}
		defer root.Close()
		return WriteRoot(w, root, ".", "")
	}
	root, err := os.OpenRoot(filepath.Dir(resolved))
	if err != nil {
		return osError(src, err)
	}
	defer root.Close()
	return WriteRoot(w, root, filepath.Base(resolved), prefix)
}

// WriteRoot writes a tar stream of name, a file or directory inside root, to
// w. The entries are named prefix, prefix/a, prefix/b/c...; with an empty
// prefix a directory's entries are named by their path inside it and the
// directory itself gets no entry (prefix may not be empty for a file).
func WriteRoot(w io.Writer, root *os.Root, name, prefix string) error {
	fi, err := root.Stat(name)
	if err != nil {
		return osError(name, err)
	}
	bp := getBuf()
	defer putBuf(bp)
	tw := &treeWriter{tw: tar.NewWriter(w), buf: *bp}
	switch {
	case fi.IsDir():
		dir, err := root.OpenRoot(name)
		if err != nil {
			return osError(name, err)
		}
		err = tw.dir(dir, prefix, fi)
		dir.Close()
		if err != nil {
			return err
		}
	case fi.Mode().IsRegular():
		if prefix == "" {
			return errdefs.WithMessage(errdefs.ErrInvalidArgument, "archive: a file needs a non-empty entry name")
		}
		f, err := root.Open(name)
		if err != nil {
			return osError(name, err)
		}
		err = tw.file(f, prefix)
		f.Close()
		if err != nil {
			return err
		}
	default:
		return errdefs.WithMessage(errdefs.ErrInvalidArgument,
			fmt.Sprintf("%s is not a regular file or a directory; only those can be archived", name))
	}
	return tw.tw.Close()
}

type treeWriter struct {
	tw  *tar.Writer
	buf []byte
}

// dir writes the entry of the directory d (named prefix) and, recursively,
// its contents. Subdirectories are opened relative to d, so each step costs
// one openat and symlinks are never followed.
func (t *treeWriter) dir(d *os.Root, prefix string, fi fs.FileInfo) error {
	if prefix != "" {
		if err := t.tw.WriteHeader(header(fi, tar.TypeDir, prefix+"/", "")); err != nil {
			return err
		}
	}
	f, err := d.Open(".")
	if err != nil {
		return osError(prefix, err)
	}
	entries, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return osError(prefix, err)
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int {
		switch {
		case a.Name() < b.Name():
			return -1
		case a.Name() > b.Name():
			return 1
		}
		return 0
	})
	for _, e := range entries {
		if err := t.entry(d, e, path.Join(prefix, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func (t *treeWriter) entry(d *os.Root, e fs.DirEntry, name string) error {
	switch e.Type() {
	case fs.ModeDir:
		fi, err := d.Lstat(e.Name())
		if err != nil {
			return osError(name, err)
		}
		sub, err := d.OpenRoot(e.Name())
		if err != nil {
			return osError(name, err)
		}
		defer sub.Close()
		return t.dir(sub, name, fi)
	case fs.ModeSymlink:
		target, err := d.Readlink(e.Name())
		if err != nil {
			return osError(name, err)
		}
		fi, err := d.Lstat(e.Name())
		if err != nil {
			return osError(name, err)
		}
		return t.tw.WriteHeader(header(fi, tar.TypeSymlink, name, target))
	case 0:
		f, err := d.Open(e.Name())
		if err != nil {
			return osError(name, err)
		}
		defer f.Close()
		return t.file(f, name)
	}
	return nil // sockets, fifos, devices: nothing a copy could restore
}

// file writes one regular file. It copies exactly the size it announced: a
// file that shrinks while being read is an error, one that grows is cut.
func (t *treeWriter) file(f *os.File, name string) error {
	fi, err := f.Stat()
	if err != nil {
		return osError(name, err)
	}
	if !fi.Mode().IsRegular() {
		return nil // replaced by something else since the directory was read
	}
	hdr := header(fi, tar.TypeReg, name, "")
	if err := t.tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.CopyBuffer(onlyWriter{t.tw}, onlyReader{io.LimitReader(f, hdr.Size)}, t.buf)
	if err != nil {
		return osError(name, err)
	}
	if n != hdr.Size {
		return errdefs.WithMessage(errdefs.ErrFailedPrecondition,
			fmt.Sprintf("%s shrank from %d to %d bytes while being archived; try again", name, hdr.Size, n))
	}
	return nil
}

func header(fi fs.FileInfo, typ byte, name, link string) *tar.Header {
	h := &tar.Header{
		Typeflag: typ,
		Name:     name,
		Linkname: link,
		Mode:     int64(UnixMode(fi.Mode())),
		ModTime:  fi.ModTime().Truncate(time.Second),
	}
	if typ == tar.TypeReg {
		h.Size = fi.Size()
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		h.Uid, h.Gid = int(st.Uid), int(st.Gid)
	}
	return h
}

// UnixMode is the permission word (with set-user-ID, set-group-ID and
// sticky bits) of a Go FileMode, as tar and stat store it.
func UnixMode(m fs.FileMode) uint32 {
	mode := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}
