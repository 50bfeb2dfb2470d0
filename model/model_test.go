package model_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/model"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct{ spec, provider, name string }{
		{"anthropic:claude-sonnet-4-5", "anthropic", "claude-sonnet-4-5"},
		{"openai:gpt-4.1", "openai", "gpt-4.1"},
		{"openai:llama3.1:8b", "openai", "llama3.1:8b"},
		{"script:./examples/fix.json", "script", "./examples/fix.json"},
	} {
		p, n, err := model.Parse(tc.spec)
		if err != nil || p != tc.provider || n != tc.name {
			t.Errorf("Parse(%q) = %q, %q, %v", tc.spec, p, n, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"foo:bar", `unknown model provider "foo": use anthropic:MODEL, openai:MODEL or script:PATH`},
		{"gpt-4.1", `model "gpt-4.1" has no provider: use anthropic:MODEL, openai:MODEL or script:PATH`},
		{"", "no model given"},
		{"anthropic:", `model "anthropic:" names no model: use anthropic:MODEL`},
		{"script:", "use script:PATH"},
	} {
		_, _, err := model.Parse(tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Parse(%q): %v, want %q", tc.spec, err, tc.want)
		}
	}
}
