package errdefs

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"connectrpc.com/connect"
)

// The wire carries the exact kind in this metadata key, because several kinds
// share one Connect code (too large and no space are both resource_exhausted).
// KindHeader carries an error's exact kind on the wire.
const KindHeader = "Reins-Error-Kind"

// ExitCodeHeader carries the exit status an error gives a command line
// (WithExitCode).
const ExitCodeHeader = "Reins-Exit-Code"

var kindNames = map[error]string{
	ErrNotFound: "not_found", ErrAlreadyExists: "already_exists",
	ErrInvalidArgument: "invalid_argument", ErrIsDirectory: "is_directory", ErrPermissionDenied: "permission_denied",
	ErrUnauthenticated: "unauthenticated", ErrTimeout: "timeout",
	ErrTooLarge: "too_large", ErrNoSpace: "no_space",
	ErrResourceExhausted: "resource_exhausted", ErrFailedPrecondition: "failed_precondition",
	ErrUnavailable: "unavailable", ErrCanceled: "canceled", ErrInternal: "internal",
	ErrUnimplemented: "unimplemented",
}

var kindCodes = map[error]connect.Code{
	ErrNotFound: connect.CodeNotFound, ErrAlreadyExists: connect.CodeAlreadyExists,
	ErrInvalidArgument: connect.CodeInvalidArgument, ErrIsDirectory: connect.CodeInvalidArgument, ErrPermissionDenied: connect.CodePermissionDenied,
	ErrUnauthenticated: connect.CodeUnauthenticated, ErrTimeout: connect.CodeDeadlineExceeded,
	ErrTooLarge: connect.CodeResourceExhausted, ErrNoSpace: connect.CodeResourceExhausted,
	ErrResourceExhausted: connect.CodeResourceExhausted, ErrFailedPrecondition: connect.CodeFailedPrecondition,
	ErrUnavailable: connect.CodeUnavailable, ErrCanceled: connect.CodeCanceled, ErrInternal: connect.CodeInternal,
	ErrUnimplemented: connect.CodeUnimplemented,
}

// ToConnect turns err into a Connect error carrying its kind. A server
// calls it in one place, through an Interceptor. A nil err stays nil.
func ToConnect(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	code, hasCode := ExitCode(err)
	kind := Kind(err)
	if kind == nil {
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			kind = ErrTimeout
		case errors.Is(err, context.Canceled):
			kind = ErrCanceled
		default:
			kind = ErrInternal
		}
	}
	// The kind travels in metadata, so the text drops a trailing ": not
	// found" that wrapping added: users read "sandbox x not found".
	msg := strings.TrimSuffix(err.Error(), ": "+kind.Error())
	ce = connect.NewError(kindCodes[kind], errors.New(msg))
	ce.Meta().Set(KindHeader, kindNames[kind])
	if hasCode {
		ce.Meta().Set(ExitCodeHeader, strconv.Itoa(code))
	}
	return ce
}

// FromConnect turns an error returned by a Connect client back into an error
// of the right kind whose text is the server's message. Other errors pass
// through unchanged.
func FromConnect(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	err = fromConnect(ce)
	if code, cerr := strconv.Atoi(ce.Meta().Get(ExitCodeHeader)); cerr == nil {
		err = WithExitCode(err, code)
	}
	return err
}

func fromConnect(ce *connect.Error) error {
	name := ce.Meta().Get(KindHeader)
	for k, n := range kindNames {
		if n == name {
			return WithMessage(k, ce.Message())
		}
	}
	switch ce.Code() {
	case connect.CodeNotFound:
		return WithMessage(ErrNotFound, ce.Message())
	case connect.CodeAlreadyExists:
		return WithMessage(ErrAlreadyExists, ce.Message())
	case connect.CodeInvalidArgument:
		return WithMessage(ErrInvalidArgument, ce.Message())
	case connect.CodePermissionDenied:
		return WithMessage(ErrPermissionDenied, ce.Message())
	case connect.CodeUnauthenticated:
		return WithMessage(ErrUnauthenticated, ce.Message())
	case connect.CodeDeadlineExceeded:
		return WithMessage(ErrTimeout, ce.Message())
	case connect.CodeResourceExhausted:
		return WithMessage(ErrResourceExhausted, ce.Message())
	case connect.CodeFailedPrecondition:
		return WithMessage(ErrFailedPrecondition, ce.Message())
	case connect.CodeUnavailable:
		return WithMessage(ErrUnavailable, ce.Message())
	case connect.CodeCanceled:
		return WithMessage(ErrCanceled, ce.Message())
	case connect.CodeUnimplemented:
		return WithMessage(ErrUnimplemented, ce.Message())
	}
	return WithMessage(ErrInternal, ce.Message())
}

// Interceptor is the RPC edge of a Connect server: installed on its
// handlers (connect.WithInterceptors), it turns each error a handler
// returns, unary or at the end of a stream, into a Connect error carrying
// its kind (ToConnect), once. Handlers return plain wrapped errors. An
// error that already is a Connect error (an executor's answer relayed
// whole) passes unchanged. Calls made as a client are left alone.
type Interceptor struct {
	// Prepare, if set, sees every error that is not yet a Connect error
	// before it is translated, and returns what to translate: to log it,
	// or to take out what the caller must not read. It must keep the
	// error's kind (wrap it, or return it).
	Prepare func(ctx context.Context, procedure string, err error) error
}

var _ connect.Interceptor = (*Interceptor)(nil)

// Error translates err, returned by the handler of procedure. It is the
// same translation for the few calls a plain HTTP handler answers before
// any Connect handler runs (authentication, a proxy).
func (i *Interceptor) Error(ctx context.Context, procedure string, err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	if i.Prepare != nil {
		err = i.Prepare(ctx, procedure, err)
	}
	return ToConnect(err)
}

func (i *Interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		if err == nil || req.Spec().IsClient {
			return resp, err
		}
		return resp, i.Error(ctx, req.Spec().Procedure, err)
	}
}

func (i *Interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i *Interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return i.Error(ctx, conn.Spec().Procedure, next(ctx, conn))
	}
}
