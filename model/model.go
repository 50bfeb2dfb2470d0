// Package model is the brain's vocabulary and what the model providers
// share: the conversation (Message, Block), one call to a model (Request,
// Response, Usage), the Model interface, parsing a model spec
// ("anthropic:claude-sonnet-4-5") and the shape of the providers' final
// errors.
//
// The providers live in model/anthropic, model/openai and model/script; each
// implements Model and imports this package, never the agent loop. cmd picks
// one by the provider name Parse returns.
package model

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/model/retry"
)

// Providers are the provider names Parse accepts.
var Providers = []string{"anthropic", "openai", "script"}

const usage = "use anthropic:MODEL, openai:MODEL or script:PATH"

// Parse splits a model spec into its provider and the provider's name for
// the model: "anthropic:claude-sonnet-4-5", "openai:gpt-4.1",
// "openai:llama3.1:8b" (only the first colon splits), "script:./fix.json".
func Parse(spec string) (provider, name string, err error) {
	provider, name, ok := strings.Cut(strings.TrimSpace(spec), ":")
	switch {
	case spec == "":
		return "", "", invalid("no model given: %s", usage)
	case !ok:
		return "", "", invalid("model %q has no provider: %s", spec, usage)
	}
	known := false
	for _, p := range Providers {
		known = known || p == provider
	}
	if !known {
		return "", "", invalid("unknown model provider %q: %s", provider, usage)
	}
	if name == "" {
		what := "MODEL"
		if provider == "script" {
			what = "PATH"
		}
		return "", "", invalid("model %q names no model: use %s:%s", spec, provider, what)
	}
	return provider, name, nil
}

// invalid is an ErrInvalidArgument whose text is the message alone: these
// are shown to people as they are.
func invalid(format string, args ...any) error {
	return errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// Error is a provider's final error. Its text says everything (what the
// provider answered and what to do); it answers errors.Is for its errdefs
// kind and errors.Is/As for the cause underneath (a context error, the SDK's
// error).
type Error struct {
	Kind error
	Msg  string
	Err  error
}

func (e *Error) Error() string { return e.Msg }

func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// StatusKind is the errdefs kind of an HTTP status a provider refused a
// request with.
func StatusKind(status int) error {
	switch {
	case status == http.StatusUnauthorized:
		return errdefs.ErrUnauthenticated
	case status == http.StatusForbidden:
		return errdefs.ErrPermissionDenied
	case status == http.StatusNotFound:
		return errdefs.ErrNotFound
	case status == http.StatusRequestEntityTooLarge:
		return errdefs.ErrTooLarge
	case status == http.StatusPaymentRequired || status == http.StatusTooManyRequests:
		return errdefs.ErrResourceExhausted
	case status == http.StatusRequestTimeout || status >= 500:
		return errdefs.ErrUnavailable
	case status == http.StatusBadRequest || status == http.StatusUnprocessableEntity:
		return errdefs.ErrInvalidArgument
	default:
		return errdefs.ErrFailedPrecondition
	}
}

// Explain builds a provider's final error from what its retries returned:
// "anthropic: 401 authentication_error: invalid x-api-key (check
// ANTHROPIC_API_KEY)", "openai: 503 Service Unavailable: … (gave up after 5
// attempts)". describe renders one attempt's error and gives its kind;
// Explain adds the provider's name, what the retries did, and the kinds of
// giving up (ErrUnavailable) and of the context ending (ErrCanceled,
// ErrTimeout).
func Explain(ctx context.Context, provider string, err error, describe func(error) (string, error)) error {
	var gaveUp *retry.Error
	if !errors.As(err, &gaveUp) {
		if cerr := ctx.Err(); cerr != nil {
			return &Error{Kind: ctxKind(cerr), Msg: fmt.Sprintf("%s: request stopped: %v", provider, cerr), Err: err}
		}
		detail, kind := describe(err)
		return &Error{Kind: kind, Msg: provider + ": " + detail, Err: err}
	}
	detail, _ := describe(gaveUp.Err)
	var kind error
	switch c := gaveUp.Cause; {
	case c == nil || errors.Is(c, retry.ErrWaitTooLong):
		kind = errdefs.ErrUnavailable
	case errors.Is(c, retry.ErrPastDeadline):
		kind = errdefs.ErrTimeout
	default:
		kind = ctxKind(c)
	}
	return &Error{Kind: kind, Msg: fmt.Sprintf("%s: %s (%s)", provider, detail, gaveUp.Summary()), Err: err}
}

func ctxKind(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return errdefs.ErrTimeout
	}
	return errdefs.ErrCanceled
}
