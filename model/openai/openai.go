// Package openai is the model.Model of OpenAI's Chat Completions API with
// tool calls, and of the servers that speak it (Ollama, vLLM, llama.cpp)
// through Config.BaseURL or OPENAI_BASE_URL.
//
// Chat Completions differs from model.Request in three ways this package
// bridges: tool results become "tool" messages; images in tool results,
// which tool messages cannot carry, go in a user message right after them;
// and a tool call whose arguments are not a JSON object is returned with
// model.Block.InputError set instead of failing the call.
package openai

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/model/retry"
)

const (
	keyVar  = "OPENAI_API_KEY"
	baseVar = "OPENAI_BASE_URL"

	// DefaultBaseURL is OpenAI's own API, the only base URL that needs a key.
	DefaultBaseURL = "https://api.openai.com/v1"
	// DefaultTimeout bounds one attempt.
	DefaultTimeout = 10 * time.Minute
)

// Config configures a Model. Zero fields take the defaults noted.
type Config struct {
	// APIKey defaults to $OPENAI_API_KEY. It is required for OpenAI's own
	// API; a local server (any other BaseURL) may do without.
	APIKey     string
	BaseURL    string        // default $OPENAI_BASE_URL, else DefaultBaseURL
	Model      string        // used when a Request names no model
	MaxTokens  int           // used when a Request sets none; 0 sends no limit
	HTTPClient *http.Client  // default the SDK's client
	Timeout    time.Duration // per attempt; default DefaultTimeout
	Retry      retry.Policy  // default retry's (5 attempts)
}

// Model calls a Chat Completions API.
type Model struct {
	client sdk.Client
	cfg    Config
	// official is whether BaseURL is OpenAI's own API, which wants
	// max_completion_tokens where other servers know only max_tokens.
	official bool
}

var _ model.Model = (*Model)(nil)

// New returns a Model. It fails, naming the variable, when the base URL is
// OpenAI's own and no API key is configured.
func New(cfg Config) (*Model, error) {
	if cfg.APIKey == "" {
		cfg.APIKey = os.Getenv(keyVar)
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = os.Getenv(baseVar)
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf("openai: base URL %q is not an http(s) URL (check %s)", cfg.BaseURL, baseVar))
	}
	official := u.Hostname() == "api.openai.com"
	if cfg.APIKey == "" && official {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf("openai: no API key: set %s (or set %s to use a local server such as Ollama or vLLM)", keyVar, baseVar))
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	opts := []option.RequestOption{
		option.WithBaseURL(cfg.BaseURL),
		option.WithAPIKey(cfg.APIKey),
		option.WithMaxRetries(0), // one retry policy: ours
		option.WithRequestTimeout(cfg.Timeout),
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	return &Model{client: sdk.NewClient(opts...), cfg: cfg, official: official}, nil
}

// Generate sends one request, retrying what is worth retrying.
func (m *Model) Generate(ctx context.Context, req *model.Request) (*model.Response, error) {
	params, err := m.params(req)
	if err != nil {
		return nil, err
	}
	var cc *sdk.ChatCompletion
	err = m.cfg.Retry.Do(ctx, func(ctx context.Context) error {
		var err error
		cc, err = m.client.Chat.Completions.New(ctx, params)
		return err
	}, classify)
	if err != nil {
		return nil, model.Explain(ctx, "openai", err, m.describe(params.Model))
	}
	return response(cc)
}

func classify(err error) retry.Verdict {
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		if apiErr.Code == "insufficient_quota" {
			return retry.Verdict{} // a 429 that waiting does not cure
		}
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

// describe renders one attempt's error: the server's status, error code and
// message, and what to check.
func (m *Model) describe(modelName string) func(error) (string, error) {
	return func(err error) (string, error) {
		var apiErr *sdk.Error
		if !errors.As(err, &apiErr) {
			msg := err.Error()
			if !m.official {
				msg += fmt.Sprintf(" (is the server at %s running? %s sets it)", m.cfg.BaseURL, baseVar)
			}
			return msg, errdefs.ErrUnavailable
		}
		code := apiErr.Code
		if code == "" {
			code = apiErr.Type
		}
		if code == "" {
			code = http.StatusText(apiErr.StatusCode)
		}
		text := apiErr.Message
		if text == "" {
			text = body(apiErr.Response)
		}
		msg := fmt.Sprintf("%d %s: %s", apiErr.StatusCode, code, text)
		kind := model.StatusKind(apiErr.StatusCode)
		switch {
		case apiErr.StatusCode == http.StatusUnauthorized || apiErr.StatusCode == http.StatusForbidden:
			msg += " (check " + keyVar + ")"
		case apiErr.StatusCode == http.StatusNotFound:
			msg = fmt.Sprintf("model %q: %s (check the model name", modelName, msg)
			if !m.official {
				msg += " and " + baseVar + "=" + m.cfg.BaseURL
			}
			msg += ")"
		case apiErr.Code == "insufficient_quota":
			msg += " (check the account's plan and billing)"
		}
		return msg, kind
	}
}

// body is the start of an error response the SDK could not parse, as
// servers other than OpenAI's may send.
func body(r *http.Response) string {
	if r == nil || r.Body == nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(r.Body, 512))
	return strings.TrimSpace(string(b))
}
