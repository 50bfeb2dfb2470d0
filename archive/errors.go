package archive

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/reinsdev/reins/errdefs"
)

// errEscapes is the error os.Root returns for a path that would leave the
// root. The os package does not export it, so it is captured once by asking a
// root for an absolute path, which it always refuses that way.
var errEscapes = sync.OnceValue(func() error {
	r, err := os.OpenRoot("/")
	if err != nil {
		return nil
	}
	defer r.Close()
	_, err = r.Lstat("/")
	return errors.Unwrap(err)
})

// IsEscape reports whether err is os.Root's refusal of a path that leads
// outside the root (through ".." or a symbolic link).
func IsEscape(err error) bool {
	e := errEscapes()
	return e != nil && errors.Is(err, e)
}

// osError gives err, from an operation on name, the kind it belongs to.
func osError(name string, err error) error {
	if err == nil {
		return nil
	}
	if errdefs.Kind(err) != nil {
		return err
	}
	var kind error
	switch {
	case IsEscape(err):
		return errdefs.WithMessage(errdefs.ErrPermissionDenied,
			fmt.Sprintf("%s leads outside the directory through a symbolic link; refusing", name))
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		kind = errdefs.ErrNoSpace
	case errors.Is(err, fs.ErrNotExist):
		kind = errdefs.ErrNotFound
	case errors.Is(err, fs.ErrExist):
		kind = errdefs.ErrAlreadyExists
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		kind = errdefs.ErrPermissionDenied
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ELOOP):
		kind = errdefs.ErrInvalidArgument
	default:
		return fmt.Errorf("%s: %w", name, err)
	}
	return errdefs.WithMessage(kind, fmt.Sprintf("%s: %s", name, describe(err)))
}

// describe is the system's words for err without the operation and path
// os.PathError repeats.
func describe(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err.Error()
	}
	return err.Error()
}

// umask is the process's file mode creation mask, read once from
// /proc/self/status (never with umask(2), which would change it for a moment
// for every thread). When it cannot be read, every bit counts as masked so
// that modes are always set explicitly.
var umask = sync.OnceValue(func() fs.FileMode {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0o777
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
			if err != nil {
				return 0o777
			}
			return fs.FileMode(m) & 0o777
		}
	}
	return 0o777
})
