package errdefs

import (
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// HostPathWords stands in a message for a path of the host.
const HostPathWords = "(a path on the host)"

// Redact returns err with the host paths its chain names (those of file
// operations and of unix sockets, found by the errors' types, never by
// reading their text) taken out of its text, or err itself when its text
// names none. The result is still err for errors.Is and errors.As. Use it
// wherever an error's text reaches a tenant other than through the API's
// interceptor: a run's log, a tool result the model reads.
func Redact(err error) error {
	if err == nil {
		return nil
	}
	msg, redact := err.Error(), false
	for _, p := range HostPaths(err) {
		if strings.Contains(msg, p) {
			msg, redact = strings.ReplaceAll(msg, p, HostPathWords), true
		}
	}
	if !redact {
		return err
	}
	return &redacted{error: err, msg: msg}
}

// Public is Redact(err)'s text.
func Public(err error) string {
	if err == nil {
		return ""
	}
	return Redact(err).Error()
}

// redacted is an error whose text leaves something out; it is still the
// error it wraps for errors.Is and errors.As.
type redacted struct {
	error
	msg string
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.error }

// HostPaths are the host paths err's chain names, longest first.
func HostPaths(err error) []string {
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
