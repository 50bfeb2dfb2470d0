// Package errdefs holds the few error kinds reins uses everywhere.
//
// Code wraps a kind once, with context, where the error is first known:
//
//	fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
//
// and callers test kinds with errors.Is, never by matching strings. Kinds are
// translated to wire codes only at the RPC edge (see connect.go).
package errdefs

import (
	"errors"
	"fmt"
)

var (
	ErrNotFound           = errors.New("not found")
	ErrAlreadyExists      = errors.New("already exists")
	ErrInvalidArgument    = errors.New("invalid argument")
	ErrPermissionDenied   = errors.New("permission denied")
	ErrUnauthenticated    = errors.New("unauthenticated")
	ErrTimeout            = errors.New("timed out")
	ErrTooLarge           = errors.New("too large")
	ErrNoSpace            = errors.New("no space left")
	ErrResourceExhausted  = errors.New("resource exhausted")
	ErrFailedPrecondition = errors.New("failed precondition")
	ErrUnavailable        = errors.New("unavailable")
	ErrCanceled           = errors.New("canceled")
	ErrInternal           = errors.New("internal error")
	// ErrUnimplemented: the other side (an older executor, say) does not
	// have the call.
	ErrUnimplemented = errors.New("not implemented")
	// ErrIsDirectory: a call for a file named a directory. It is an
	// invalid argument too (errors.Is answers both), so callers that
	// test for that keep working; the wire carries it as is_directory.
	ErrIsDirectory = fmt.Errorf("is a directory: %w", ErrInvalidArgument)
)

// kinds lists every kind, in the order Kind looks for them.
var kinds = []error{
	ErrNotFound, ErrAlreadyExists, ErrIsDirectory, ErrInvalidArgument, ErrPermissionDenied,
	ErrUnauthenticated, ErrTimeout, ErrTooLarge, ErrNoSpace,
	ErrResourceExhausted, ErrFailedPrecondition, ErrUnavailable, ErrCanceled,
	ErrInternal, ErrUnimplemented,
}

// Kind returns the first kind err wraps, or nil if it wraps none.
func Kind(err error) error {
	for _, k := range kinds {
		if errors.Is(err, k) {
			return k
		}
	}
	return nil
}

// kindError carries a message that already says everything, while still
// answering errors.Is for its kind. It is how a kind survives a wire hop.
type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

// WithMessage returns an error whose text is msg and whose kind is kind.
func WithMessage(kind error, msg string) error {
	if kind == nil {
		kind = ErrInternal
	}
	return &kindError{kind: kind, msg: msg}
}

// exitError carries the exit status a shell would give for an error (127
// for a command not found, 137 for a memory kill), for the CLI to exit
// with.
type exitError struct {
	error
	code int
}

func (e *exitError) Unwrap() error { return e.error }

// WithExitCode returns err carrying code as the exit status a command line
// should end with because of it. It survives the wire (see ToConnect).
func WithExitCode(err error, code int) error {
	if err == nil {
		return nil
	}
	return &exitError{err, code}
}

// ExitCode returns the exit status err carries, if it carries one.
func ExitCode(err error) (int, bool) {
	var e *exitError
	if errors.As(err, &e) {
		return e.code, true
	}
	return 0, false
}
