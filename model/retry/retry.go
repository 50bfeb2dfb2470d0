// Package retry is the one retry policy of the model providers: a bounded
// number of attempts, exponential backoff with jitter, the server's
// Retry-After obeyed, and the caller's context honoured while waiting.
//
// The providers turn their SDKs' own retries off so that this is the only
// policy; they tell Do which errors are worth another try.
package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"
)

// Policy says how often and how long to retry. The zero Policy is the
// default: 5 attempts, backoff from 1s doubling to at most 30s, Retry-After
// obeyed up to 2 minutes.
type Policy struct {
	Attempts int           // attempts in all, the first included
	Base     time.Duration // backoff before the second attempt
	Max      time.Duration // longest backoff
	// MaxRetryAfter is the longest Retry-After obeyed: a server asking for
	// a longer wait ends the retries at once rather than parking the caller.
	MaxRetryAfter time.Duration
}

func (p Policy) withDefaults() Policy {
	if p.Attempts <= 0 {
		p.Attempts = 5
	}
	if p.Base <= 0 {
		p.Base = time.Second
	}
	if p.Max <= 0 {
		p.Max = 30 * time.Second
	}
	if p.Max < p.Base {
		p.Max = p.Base
	}
	if p.MaxRetryAfter <= 0 {
		p.MaxRetryAfter = 2 * time.Minute
	}
	return p
}

// Verdict is what a provider makes of a failed attempt.
type Verdict struct {
	Retry bool          // worth another attempt
	After time.Duration // the wait the server asked for; 0 if it did not
}

// Causes of an Error other than the context's end.
var (
	// ErrWaitTooLong: the server asked for a wait longer than
	// Policy.MaxRetryAfter.
	ErrWaitTooLong = errors.New("the server asks for too long a wait")
	// ErrPastDeadline: the next attempt would come after the context's
	// deadline, so Do does not wait for it.
	ErrPastDeadline = errors.New("the next attempt would come after the deadline")
)

// Error is what Do returns when it gives up on an error worth retrying.
type Error struct {
	Attempts int           // attempts made
	Err      error         // the last attempt's error
	Cause    error         // nil: out of attempts; ErrWaitTooLong, ErrPastDeadline or the context's error
	Wait     time.Duration // the wait that was not made, when Cause is not nil
}

func (e *Error) Error() string { return fmt.Sprintf("%v (%s)", e.Err, e.Summary()) }

// Summary says why Do gave up, e.g. "gave up after 5 attempts".
func (e *Error) Summary() string {
	n := fmt.Sprintf("%d attempts", e.Attempts)
	if e.Attempts == 1 {
		n = "1 attempt"
	}
	switch {
	case e.Cause == nil:
		return "gave up after " + n
	case errors.Is(e.Cause, ErrWaitTooLong):
		return fmt.Sprintf("gave up after %s: the server asks to wait %v", n, e.Wait.Round(time.Millisecond))
	case errors.Is(e.Cause, ErrPastDeadline):
		return fmt.Sprintf("gave up after %s: the next would be in %v, past the deadline", n, e.Wait.Round(time.Millisecond))
	default:
		return fmt.Sprintf("stopped after %s while waiting to retry: %v", n, e.Cause)
	}
}

func (e *Error) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Cause}
}

// Do calls call until it succeeds, fails with an error classify says is not
// worth retrying (returned as it is), or Do gives up and returns an *Error.
// An attempt that fails because ctx is done is never retried; its error is
// returned as it is.
func (p Policy) Do(ctx context.Context, call func(context.Context) error, classify func(error) Verdict) error {
	p = p.withDefaults()
	for attempt := 1; ; attempt++ {
		err := call(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		v := classify(err)
		if !v.Retry {
			return err
		}
		if attempt >= p.Attempts {
			return &Error{Attempts: attempt, Err: err}
		}
		wait := v.After
		if wait > p.MaxRetryAfter {
			return &Error{Attempts: attempt, Err: err, Cause: ErrWaitTooLong, Wait: wait}
		}
		if wait <= 0 {
			wait = p.backoff(attempt)
		}
		if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
			return &Error{Attempts: attempt, Err: err, Cause: ErrPastDeadline, Wait: wait}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return &Error{Attempts: attempt, Err: err, Cause: ctx.Err(), Wait: wait}
		case <-t.C:
		}
	}
}

// backoff is the wait after the given failed attempt: Base doubled per
// attempt, capped at Max, with its upper half jittered so that clients
// that failed together do not retry together.
func (p Policy) backoff(attempt int) time.Duration {
	d := p.Base
	for i := 1; i < attempt && d < p.Max; i++ {
		d *= 2
	}
	d = min(d, p.Max)
	return d/2 + rand.N(d/2+1)
}

// After reads the wait a response asks for: retry-after-ms (OpenAI and
// Anthropic send it), else Retry-After in seconds or as an HTTP date.
func After(h http.Header) (time.Duration, bool) {
	if h == nil {
		return 0, false
	}
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0), true
	}
	return 0, false
}

// Status reports whether an HTTP status is worth another attempt: a
// timeout, a conflict, a rate limit or a server error. A response's
// x-should-retry header, when set, overrides the status.
func Status(status int, h http.Header) bool {
	switch h.Get("X-Should-Retry") {
	case "true":
		return true
	case "false":
		return false
	}
	return status == http.StatusRequestTimeout || status == http.StatusConflict ||
		status == http.StatusTooManyRequests || status >= 500
}

// Transient reports whether an error that came without a response is worth
// another attempt: a reset or refused connection, a connection closed
// mid-answer, a timeout. A name that does not resolve is not.
func Transient(err error) bool {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dns.IsTemporary || dns.IsTimeout
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
