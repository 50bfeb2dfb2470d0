package server

import (
	"context"
	"errors"
	"net/http"

	"connectrpc.com/connect"

	"github.com/reinsdev/reins/errdefs"
)

// Errors reach callers translated in one place: the errdefs.Interceptor on
// every handler (Handler installs it), and writeError for the calls a
// plain HTTP handler answers (authentication, the executor proxy). A
// handler returns a plain wrapped error.
//
// Messages are written for the people who read them and are kept, even
// for an error of no kind (internal), which is logged whole here. What a
// caller never reads is a host path from the error's chain: a file the
// service opened, the unix socket of an executor (docs/security.md,
// "errors to a tenant reveal nothing about the host").

// prepareError logs an internal error and takes host paths out of err's
// text (errdefs.Redact), keeping its kind and exit code.
func (s *Server) prepareError(ctx context.Context, procedure string, err error) error {
	kind := errdefs.Kind(err)
	if kind == nil || kind == errdefs.ErrInternal {
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			s.log.Error("call failed", "procedure", procedure, "tenant", tenant(ctx), "err", err)
		}
	}
	return errdefs.Redact(err)
}

// writeError answers a plain HTTP request with err, translated as the
// interceptor translates a handler's.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	s.errw.Write(w, r, s.errs.Error(r.Context(), r.URL.Path, err))
}

// handlerOptions are the options of every Connect handler the server
// builds.
func (s *Server) handlerOptions(opts ...connect.HandlerOption) []connect.HandlerOption {
	return append([]connect.HandlerOption{connect.WithInterceptors(s.errs), connect.WithReadMaxBytes(MaxMessage)}, opts...)
}

// MaxMessage is the largest request message the API reads (16 MiB: a run
// spec with an inline script of at most 4 MiB, a system prompt and a
// policy fit many times over). A bigger one is refused as
// resource_exhausted before it is read whole: one request must not hold
// the service's memory. Bulk bytes go through the executor calls (Upload
// streams chunks).
const MaxMessage = 16 << 20
