package files

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	"github.com/reinsdev/reins/errdefs"
)

// MakeDir makes the directory p; with parents, also the missing directories
// above it, and an existing directory is not an error. mode 0 means 0755 (as
// narrowed by the umask, like mkdir); another mode is set exactly.
func (f *FS) MakeDir(p string, parents bool, mode uint32) error {
	name, abs, err := f.resolve(p)
	if err != nil {
		return err
	}
	perm := goMode(mode)
	if mode == 0 {
		perm = 0o755
	}
	if parents {
		err = f.tree.MkdirAll(name, perm)
		if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, fs.ErrExist) {
			return errdefs.WithMessage(errdefs.ErrAlreadyExists, fmt.Sprintf(
				"%s (or a directory above it) exists and is not a directory", abs))
		}
	} else {
		err = f.tree.Mkdir(name, perm)
		switch {
		case errors.Is(err, fs.ErrExist):
			return errdefs.WithMessage(errdefs.ErrAlreadyExists, abs+" already exists")
		case errors.Is(err, fs.ErrNotExist):
			return errdefs.WithMessage(errdefs.ErrNotFound, fmt.Sprintf(
				"the parent directory of %s does not exist; set parents to create it", abs))
		}
	}
	if err != nil {
		return pathError(abs, err)
	}
	if mode != 0 {
		if file, err := f.tree.Open(name); err == nil {
			err = file.Chmod(perm)
			file.Close()
			return pathError(abs, err)
		}
	}
	return nil
}

// Remove removes the file or empty directory p; with recursive, a directory
// and everything in it. A symbolic link is removed, not its target.
func (f *FS) Remove(p string, recursive bool) error {
	name, abs, err := f.resolve(p)
	if err != nil {
		return err
	}
	if name == "." {
		return invalid("refusing to remove the sandbox's root directory")
	}
	fi, err := f.tree.Lstat(name)
	if err != nil {
		return pathError(abs, err)
	}
	if fi.IsDir() && recursive {
		return pathError(abs, f.tree.RemoveAll(name))
	}
	err = f.tree.Remove(name)
	if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
		return errdefs.WithMessage(errdefs.ErrFailedPrecondition, fmt.Sprintf(
			"the directory %s is not empty; set recursive to remove it and everything in it", abs))
	}
	return pathError(abs, err)
}

// Move renames src to dst. Without overwrite an existing dst is an error;
// with it, a file or an empty directory at dst is replaced.
func (f *FS) Move(src, dst string, overwrite bool) error {
	sname, sabs, err := f.resolve(src)
	if err != nil {
		return err
	}
	dname, dabs, err := f.resolve(dst)
	if err != nil {
		return err
	}
	if sname == "." || dname == "." {
		return invalid("the sandbox's root directory cannot be moved or replaced")
	}
	sfi, err := f.tree.Lstat(sname)
	if err != nil {
		return pathError(sabs, err)
	}
	if dfi, err := f.tree.Lstat(dname); err == nil {
		switch {
		case !overwrite:
			return errdefs.WithMessage(errdefs.ErrAlreadyExists, fmt.Sprintf(
				"%s already exists; set overwrite to replace it", dabs))
		case dfi.IsDir() && !sfi.IsDir():
			return invalid("%s is a directory and %s is not; a directory can only be replaced by a directory", dabs, sabs)
		}
	}
	err = f.tree.Rename(sname, dname)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return errdefs.WithMessage(errdefs.ErrNotFound, fmt.Sprintf("the parent directory of %s does not exist", dabs))
	case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST):
		return errdefs.WithMessage(errdefs.ErrFailedPrecondition, fmt.Sprintf(
			"%s is a directory that is not empty; it cannot be replaced", dabs))
	case errors.Is(err, syscall.EINVAL):
		return invalid("%s cannot be moved into itself (%s)", sabs, dabs)
	case errors.Is(err, syscall.ENOTDIR):
		return invalid("%s is not a directory and %s is; a file cannot replace a directory", sabs, dabs)
	}
	return pathError(dabs, err)
}
