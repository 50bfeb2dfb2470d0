package files

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/reinsdev/reins/archive"
	"github.com/reinsdev/reins/errdefs"
)

// NoSpace is the error for a disk that filled up while writing abs: what
// happened, and what the user can do about it.
func NoSpace(abs string) error {
	return errdefs.WithMessage(errdefs.ErrNoSpace, fmt.Sprintf(
		"no space left on the sandbox's disk while writing %s (the disk limit is reached; "+
			"remove files or create the sandbox with a larger --disk)", abs))
}

// pathError gives err, from an operation on the sandbox path abs, its kind
// and a message in words. Errors that already have a kind pass unchanged.
func pathError(abs string, err error) error {
	if err == nil {
		return nil
	}
	if errdefs.Kind(err) != nil {
		return err
	}
	var kind error
	var msg string
	switch {
	case archive.IsEscape(err):
		kind, msg = errdefs.ErrPermissionDenied, "the path leads outside the sandbox's root directory through a symbolic link"
	case isNoSpace(err):
		return NoSpace(abs)
	case errors.Is(err, fs.ErrNotExist):
		kind, msg = errdefs.ErrNotFound, "no such file or directory"
	case errors.Is(err, fs.ErrExist):
		kind, msg = errdefs.ErrAlreadyExists, "it already exists"
	case errors.Is(err, syscall.EROFS):
		kind, msg = errdefs.ErrPermissionDenied, "the file system is read-only"
	case errors.Is(err, fs.ErrPermission):
		kind, msg = errdefs.ErrPermissionDenied, "permission denied"
	case errors.Is(err, syscall.ENOTDIR):
		kind, msg = errdefs.ErrInvalidArgument, "a component of the path is not a directory"
	case errors.Is(err, syscall.EISDIR):
		kind, msg = errdefs.ErrIsDirectory, "it is a directory"
	case errors.Is(err, syscall.ELOOP):
		kind, msg = errdefs.ErrInvalidArgument, "too many levels of symbolic links"
	case errors.Is(err, syscall.ENOTEMPTY):
		kind, msg = errdefs.ErrFailedPrecondition, "the directory is not empty"
	case errors.Is(err, syscall.EXDEV):
		kind, msg = errdefs.ErrFailedPrecondition, "it cannot be moved across file systems; copy it and remove the original"
	case errors.Is(err, syscall.ENAMETOOLONG):
		kind, msg = errdefs.ErrInvalidArgument, "the name is too long"
	case errors.Is(err, syscall.EBUSY):
		kind, msg = errdefs.ErrFailedPrecondition, "it is busy (a mount point?)"
	default:
		return errdefs.WithMessage(errdefs.ErrInternal, fmt.Sprintf("%s: %v", abs, describe(err)))
	}
	return errdefs.WithMessage(kind, abs+": "+msg)
}

func describe(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Op + ": " + le.Err.Error()
	}
	return err.Error()
}

// isDirectory is the error for a file call that reached a directory.
func isDirectory(format string, a ...any) error {
	return errdefs.WithMessage(errdefs.ErrIsDirectory, fmt.Sprintf(format, a...))
}

func invalid(format string, a ...any) error {
	return errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf(format, a...))
}
