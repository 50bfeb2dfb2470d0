package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/reinsdev/reins/agent"
	"github.com/reinsdev/reins/errdefs"
)

// TestOpenModelTenantScript: the registry refuses a tenant's script file
// with one answer, whatever the path holds, and opens its inline script.
func TestOpenModelTenantScript(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	var first string
	for _, p := range []string{"/dev/zero", "/etc/shadow", "/root", "/nosuch", fifo} {
		_, _, err := openModel(agent.ModelSpec{Model: "script:" + p, Tenant: "acme"})
		if !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("tenant script:%s: %v, want permission denied", p, err)
			continue
		}
		if first == "" {
			first = err.Error()
		} else if err.Error() != first {
			t.Errorf("tenant script:%s answers %q, another %q", p, err, first)
		}
	}
	if _, _, err := openModel(agent.ModelSpec{Model: "script:x.json", Script: `{"turns":[{"text":"hi"}]}`, Tenant: "acme"}); err != nil {
		t.Errorf("tenant inline script: %v", err)
	}
	// The admin's path is read, but only a regular file.
	for _, p := range []string{"/dev/zero", fifo} {
		if _, _, err := openModel(agent.ModelSpec{Model: "script:" + p}); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("admin script:%s: %v, want not a regular file", p, err)
		}
	}
}

// TestModelArgInlinesScripts: the CLI reads a script: file itself and
// sends it; other models pass as they are.
func TestModelArgInlinesScripts(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s.json")
	os.WriteFile(p, []byte(`{"turns":[{"text":"hi"}]}`), 0o644)
	m, inline, err := modelArg("script:" + p)
	if err != nil || m != "script:"+p || !strings.Contains(inline, `"hi"`) {
		t.Errorf("modelArg(script:%s) = %q, %q, %v", p, m, inline, err)
	}
	if m, inline, err := modelArg("anthropic:claude-sonnet-4-5"); err != nil || m != "anthropic:claude-sonnet-4-5" || inline != "" {
		t.Errorf("modelArg(anthropic:…) = %q, %q, %v", m, inline, err)
	}
	os.WriteFile(p, []byte(`{"turns":[{"txt":"hi"}]}`), 0o644)
	if _, _, err := modelArg("script:" + p); err == nil || !strings.Contains(err.Error(), `unknown field "txt"`) {
		t.Errorf("a malformed local script: %v, want the fault named", err)
	}
}
