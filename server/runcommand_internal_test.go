package server

import (
	"errors"
	"strings"
	"testing"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/errdefs"
)

// TestRunCommandRequest: a RunCommand becomes the executor's Exec with
// its defaults, and what is out of bounds is refused in words.
func TestRunCommandRequest(t *testing.T) {
	ereq, timeout, limit, err := runCommandExec(&reinsv1.RunCommandRequest{Command: "echo hi", Env: []string{"A=1"}, Stdin: []byte("x")})
	if err != nil || strings.Join(ereq.Argv, " ") != "/bin/sh -c echo hi" || timeout != RunCommandTimeout || limit != RunCommandOutput ||
		!ereq.Stdin || ereq.TimeoutMs != RunCommandTimeout.Milliseconds() || ereq.Env[0] != "A=1" {
		t.Errorf("defaults: %v %v %v %v", ereq, timeout, limit, err)
	}
	for what, req := range map[string]*reinsv1.RunCommandRequest{
		"both command and argv": {Command: "true", Argv: []string{"true"}},
		"neither":               {},
		"an empty argv[0]":      {Argv: []string{""}},
		"a negative timeout":    {Command: "true", TimeoutMs: -1},
		"a timeout past 1 h":    {Command: "true", TimeoutMs: MaxRunCommandTimeout.Milliseconds() + 1},
		"a cap past 16 MiB":     {Command: "true", MaxOutputBytes: MaxRunCommandOutput + 1},
		"a negative cap":        {Command: "true", MaxOutputBytes: -1},
	} {
		if _, _, _, err := runCommandExec(req); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v, want invalid argument", what, err)
		}
	}
}

// TestCappedOutput: past its cap the output is dropped and counted as cut.
func TestCappedOutput(t *testing.T) {
	c := capped{max: 10}
	c.write([]byte("12345"))
	c.write([]byte("6789abcdef"))
	c.write([]byte("more"))
	if string(c.b) != "123456789a" || !c.cut {
		t.Errorf("kept %q, cut %v", c.b, c.cut)
	}
	d := capped{max: 3}
	if d.write([]byte("abc")); d.cut {
		t.Error("output of exactly the cap counted as cut")
	}
}

// TestRawStatus: a plain HTTP caller gets the status of the error's kind.
func TestRawStatus(t *testing.T) {
	for kind, want := range map[string]int{"not_found": 404, "is_directory": 400, "invalid_argument": 400,
		"no_space": 507, "too_large": 413, "failed_precondition": 409, "unauthenticated": 401, "unavailable": 503} {
		if got := rawStatus(kind, 0); got != want {
			t.Errorf("%s: %d, want %d", kind, got, want)
		}
	}
	for _, bad := range []string{"999", "0", "abc", "8"} {
		if _, err := rawMode(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("mode %q: %v", bad, err)
		}
	}
	if m, err := rawMode("0640"); err != nil || m != 0o640 {
		t.Errorf("mode 0640: %o %v", m, err)
	}
}
