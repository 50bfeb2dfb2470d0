package server

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

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

// hostPath stands in a message for a path of the host.
const hostPath = "(a path on the host)"

// prepareError logs an internal error and takes host paths out of err's
// text, keeping its kind and exit code.
func (s *Server) prepareError(ctx context.Context, procedure string, err error) error {
	kind := errdefs.Kind(err)
	if kind == nil || kind == errdefs.ErrInternal {
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			s.log.Error("call failed", "procedure", procedure, "tenant", tenant(ctx), "err", err)
		}
	}
	msg, redact := err.Error(), false
	for _, p := range hostPaths(err) {
		if strings.Contains(msg, p) {
			msg, redact = strings.ReplaceAll(msg, p, hostPath), true
		}
	}
	if !redact {
		return err
	}
	return &redacted{error: err, msg: msg}
}

// redacted is an error whose text leaves something out; it is still the
// error it wraps for errors.Is and errors.As.
type redacted struct {
	error
	msg string
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.error }

// hostPaths are the host paths err's chain names: those of file
// operations and of unix sockets. They are found by the errors' types,
// never by reading their text.
func hostPaths(err error) []string {
	var paths []string
	add := func(p string) {
		// Only absolute paths: a relative one (or "/") could match
		// ordinary words of the message.
		if filepath.IsAbs(p) && p != "/" {
			paths = append(paths, p)
		}
	}
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case *fs.PathError:
			add(e.Path)
		case *os.LinkError:
			add(e.Old)
			add(e.New)
		case *net.OpError:
			for _, a := range []net.Addr{e.Source, e.Addr} {
				if ua, ok := a.(*net.UnixAddr); ok {
					add(ua.Name)
				}
			}
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			if next := u.Unwrap(); next != nil {
				walk(next)
			}
		case interface{ Unwrap() []error }:
			for _, next := range u.Unwrap() {
				walk(next)
			}
		}
	}
	walk(err)
	// Longest first, so that a path is never cut by one of its prefixes.
	slices.SortFunc(paths, func(a, b string) int { return len(b) - len(a) })
	return paths
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
