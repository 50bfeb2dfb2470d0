package files

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"strconv"
	"syscall"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
)

// OpenRead opens the regular file p leads to (symbolic links at its end
// followed, inside the root) for a streaming reader, and describes it. A
// directory is errdefs.ErrIsDirectory; a device, fifo or socket is refused.
func (f *FS) OpenRead(p string) (*os.File, *executorv1.FileInfo, error) {
	name, abs, err := f.resolve(p)
	if err != nil {
		return nil, nil, err
	}
	// O_NONBLOCK: opening a fifo must not hang the call.
	file, err := f.tree.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, pathError(abs, err)
	}
	fi, err := file.Stat()
	if err == nil && fi.IsDir() {
		err = isDirectory("%s is a directory; read a file, or list it with ListDir", abs)
	} else if err == nil && !fi.Mode().IsRegular() {
		err = invalid("%s is not a regular file (a device, fifo or socket); only regular files can be read", abs)
	}
	if err != nil {
		file.Close()
		return nil, nil, pathError(abs, err)
	}
	return file, f.info(name, abs, fi), nil
}

// Pending is a file being written by Create: its bytes go to a temporary
// file beside it, which Commit renames over it. Until then readers see
// the old file, and Abort (or a failed Commit) leaves nothing behind.
type Pending struct {
	f         *FS
	file      *os.File
	tmp, name string
	abs       string
	perm      fs.FileMode
	old       fs.FileInfo
	n         int64
}

// Create begins an atomic write of the file p (a symbolic link at its
// end is followed: its target is replaced). mode 0 keeps the replaced
// file's mode (0644 for a new file); its owner is kept too.
func (f *FS) Create(p string, mode uint32, makeParents bool) (*Pending, error) {
	name, abs, err := f.resolve(p)
	if err != nil {
		return nil, err
	}
	name, abs, fi, err := f.followLinks(name, abs)
	if err != nil {
		return nil, err
	}
	return f.create(name, abs, mode, makeParents, fi)
}

func (f *FS) create(name, abs string, mode uint32, makeParents bool, old fs.FileInfo) (*Pending, error) {
	if name == "." || (old != nil && old.IsDir()) {
		return nil, isDirectory("%s is a directory; a file cannot replace it", abs)
	}
	perm := goMode(mode)
	if mode == 0 {
		perm = 0o644
		if old != nil {
			perm = old.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
		}
	}
	dir := path.Dir(name)
	tmp := path.Join(dir, ".reins-"+strconv.FormatUint(rand.Uint64(), 36)+".tmp")
	file, err := f.tree.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm.Perm())
	if errors.Is(err, fs.ErrNotExist) && makeParents {
		if err = f.tree.MkdirAll(dir, 0o755); err == nil {
			file, err = f.tree.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm.Perm())
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errdefs.WithMessage(errdefs.ErrNotFound, fmt.Sprintf(
			"the parent directory of %s does not exist; set make_parents to create it", abs))
	}
	if err != nil {
		return nil, pathError(abs, err)
	}
	return &Pending{f: f, file: file, tmp: tmp, name: name, abs: abs, perm: perm, old: old}, nil
}

// Write appends p to the temporary file. A full disk is errdefs.ErrNoSpace.
func (w *Pending) Write(p []byte) (int, error) {
	n, err := w.file.Write(p)
	w.n += int64(n)
	if err != nil {
		return n, pathError(w.abs, err)
	}
	return n, nil
}

// Size is the number of bytes written so far.
func (w *Pending) Size() int64 { return w.n }

// Commit gives the file its mode (and the replaced file's owner) and
// renames it into place. On failure nothing is left behind.
func (w *Pending) Commit() error {
	err := w.file.Chmod(w.perm) // the umask narrowed the mode OpenFile was given
	if err == nil && w.old != nil && w.f.isRoot {
		if st, ok := w.old.Sys().(*syscall.Stat_t); ok && (st.Uid != 0 || st.Gid != 0) {
			err = w.file.Chown(int(st.Uid), int(st.Gid))
		}
	}
	if cerr := w.file.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = w.f.tree.Rename(w.tmp, w.name)
	}
	if err != nil {
		w.f.tree.Remove(w.tmp)
		return pathError(w.abs, err)
	}
	return nil
}

// Abort drops the temporary file: the old file stays as it was.
func (w *Pending) Abort() {
	w.file.Close()
	w.f.tree.Remove(w.tmp)
}
