// Package anthropic is the model.Model of Anthropic's Messages API, with
// tool use and prompt caching.
//
// Caching: a request carries up to four cache_control breakpoints, on the
// tool list (its last tool), the system prompt, the last user turn and the
// user turn before it. Each step of a run appends to the conversation, so
// the breakpoint on the previous last user turn reads the prefix the
// previous step wrote, and the one on the new last turn writes the longer
// prefix for the next step.
package anthropic

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/model/retry"
)

const (
	keyVar  = "ANTHROPIC_API_KEY"
	baseVar = "ANTHROPIC_BASE_URL"

	// DefaultMaxTokens is the answer budget of a request that sets none. The
	// SDK refuses non-streaming requests it expects to take over 10 minutes,
	// so this stays well under that.
	DefaultMaxTokens = 8192
	// DefaultTimeout bounds one attempt.
	DefaultTimeout = 10 * time.Minute
)

// Config configures a Model. Zero fields take the defaults noted.
type Config struct {
	APIKey     string        // default $ANTHROPIC_API_KEY; required
	BaseURL    string        // default $ANTHROPIC_BASE_URL, else https://api.anthropic.com
	Model      string        // used when a Request names no model
	MaxTokens  int           // used when a Request sets none; default DefaultMaxTokens
	HTTPClient *http.Client  // default the SDK's client
	Timeout    time.Duration // per attempt; default DefaultTimeout
	Retry      retry.Policy  // default retry's (5 attempts)
}

// Model calls Anthropic's Messages API.
type Model struct {
	client sdk.Client
	cfg    Config
}

var _ model.Model = (*Model)(nil)

// New returns a Model. It fails, naming the variable, when no API key is
// configured. It reads the environment only for the key and base URL: the
// SDK's own credential chain (profiles, auth tokens) is not consulted, so
// what is used is what the error messages say.
func New(cfg Config) (*Model, error) {
	if cfg.APIKey == "" {
		cfg.APIKey = os.Getenv(keyVar)
	}
	if cfg.APIKey == "" {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "anthropic: no API key: set "+keyVar)
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = os.Getenv(baseVar)
	}
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = DefaultMaxTokens
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithAPIKey(cfg.APIKey),
		option.WithMaxRetries(0), // one retry policy: ours
		option.WithRequestTimeout(cfg.Timeout),
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	return &Model{client: sdk.NewClient(opts...), cfg: cfg}, nil
}

// Generate sends one request, retrying what is worth retrying.
func (m *Model) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	params, err := m.params(req)
	if err != nil {
		return nil, err
	}
	beta, err := betaParams(req, params)
	if err != nil {
		return nil, err
	}
	var msg *sdk.Message
	err = m.cfg.Retry.Do(ctx, func(ctx context.Context) error {
		var err error
		if beta != nil {
			msg, err = m.newBeta(ctx, *beta)
		} else {
			msg, err = m.client.Messages.New(ctx, params)
		}
		return err
	}, classify)
	if err != nil {
		return nil, model.Explain(ctx, "anthropic", err, describe(string(params.Model)))
	}
	return response(msg), nil
}

func classify(err error) retry.Verdict {
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		h := header(apiErr.Response)
		v := retry.Verdict{Retry: retry.Status(apiErr.StatusCode, h)}
		v.After, _ = retry.After(h)
		return v
	}
	return retry.Verdict{Retry: retry.Transient(err)}
}

func header(r *http.Response) http.Header {
	if r == nil {
		return nil
	}
	return r.Header
}

// describe renders one attempt's error: the provider's status, error type
// and message, and what to check.
func describe(modelName string) func(error) (string, error) {
	return func(err error) (string, error) {
		var apiErr *sdk.Error
		if !errors.As(err, &apiErr) {
			return err.Error(), errdefs.ErrUnavailable
		}
		typ, text := string(apiErr.Type()), apiErr.Message
		if typ == "" {
			typ = http.StatusText(apiErr.StatusCode)
		}
		if text == "" {
			text = strings.TrimSpace(apiErr.RawJSON())
		}
		msg := fmt.Sprintf("%d %s: %s", apiErr.StatusCode, typ, text)
		switch apiErr.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			msg += " (check " + keyVar + ")"
		case http.StatusNotFound:
			msg = fmt.Sprintf("model %q: %s (check the model name)", modelName, msg)
		}
		return msg, model.StatusKind(apiErr.StatusCode)
	}
}
