package files

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"syscall"

	"github.com/reinsdev/reins/errdefs"
)

// Link hard-links the regular file p leads to (symbolic links at its end
// followed) to dst, and describes it. It is how a file is staged for a host
// that reads the sandbox's disk directly: a link costs no copy, and the
// host never follows a name the sandbox chose. Anything but a regular file,
// or a file on another mount than dst's, is errdefs.ErrFailedPrecondition.
func (f *FS) Link(p, dst string) (fs.FileInfo, error) {
	name, abs, err := f.resolve(p)
	if err != nil {
		return nil, err
	}
	dname, dabs, err := f.resolve(dst)
	if err != nil {
		return nil, err
	}
	name, abs, fi, err := f.followLinks(name, abs)
	if err != nil {
		return nil, err
	}
	if fi == nil {
		return nil, pathError(abs, fs.ErrNotExist)
	}
	if !fi.Mode().IsRegular() {
		return nil, errdefs.WithMessage(errdefs.ErrFailedPrecondition, fmt.Sprintf("%s is not a regular file", abs))
	}
	err = f.tree.Link(name, dname)
	if errors.Is(err, syscall.EXDEV) || errors.Is(err, syscall.EPERM) {
		return nil, errdefs.WithMessage(errdefs.ErrFailedPrecondition, fmt.Sprintf("%s cannot be linked to %s: %v", abs, dabs, err))
	}
	if err != nil {
		return nil, pathError(dabs, err)
	}
	fi, err = f.tree.Lstat(dname)
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s changed while it was staged", abs)
	}
	if err != nil {
		f.tree.Remove(dname)
		return nil, errdefs.WithMessage(errdefs.ErrFailedPrecondition, err.Error())
	}
	return fi, nil
}

// Place moves the regular file staged (written by the host) to dst,
// making dst's parents, replacing a file there, owned by the executor's
// user and with mode's permission bits (0: 0644). With follow, symbolic
// links at dst's end are followed and their target is replaced (as
// WriteFile does); without, a link there is replaced. It returns the
// file's size.
func (f *FS) Place(staged, dst string, mode uint32, follow bool) (int64, error) {
	sname, sabs, err := f.resolve(staged)
	if err != nil {
		return 0, err
	}
	dname, dabs, err := f.resolve(dst)
	if err != nil {
		return 0, err
	}
	if follow {
		var target fs.FileInfo
		if dname, dabs, target, err = f.followLinks(dname, dabs); err != nil {
			return 0, err
		}
		if target != nil && target.IsDir() {
			return 0, isDirectory("%s is a directory; a file cannot replace it", dabs)
		}
	}
	if dname == "." {
		return 0, isDirectory("/ is the sandbox's root directory; a file cannot replace it")
	}
	fi, err := f.tree.Lstat(sname)
	if errors.Is(err, fs.ErrNotExist) {
		// The host wrote it, and this view of the directory does not
		// show it: gVisor caches a directory that a process here has
		// listed, and misses what the host adds to it after. The
		// caller sends the bytes over the socket instead.
		return 0, errdefs.WithMessage(errdefs.ErrFailedPrecondition, fmt.Sprintf(
			"the staged file %s is not visible inside the sandbox; send it over the socket", sabs))
	}
	if err != nil {
		return 0, pathError(sabs, err)
	}
	if !fi.Mode().IsRegular() {
		return 0, errdefs.WithMessage(errdefs.ErrFailedPrecondition, fmt.Sprintf("the staged file %s is not a regular file", sabs))
	}
	if mode&0o777 == 0 {
		mode = 0o644
	}
	if err := f.tree.Lchown(sname, os.Geteuid(), os.Getegid()); err != nil {
		return 0, pathError(sabs, err)
	}
	if err := f.tree.Chmod(sname, fs.FileMode(mode&0o777)); err != nil {
		return 0, pathError(sabs, err)
	}
	if parent := path.Dir(dabs); parent != "/" {
		if err := f.MakeDir(parent, true, 0); err != nil {
			return 0, err
		}
	}
	if err := f.tree.Rename(sname, dname); err != nil {
		if errors.Is(err, syscall.EXDEV) {
			return 0, errdefs.WithMessage(errdefs.ErrFailedPrecondition, fmt.Sprintf(
				"%s is on another mount than the staging directory; upload it as a tar stream", dabs))
		}
		if errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.ENOTEMPTY) {
			return 0, isDirectory("%s is a directory; a file cannot replace it", dabs)
		}
		return 0, pathError(dabs, err)
	}
	return fi.Size(), nil
}
