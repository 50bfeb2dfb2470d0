package mcp_test

import (
	"testing"
	"time"

	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/server/mcp"
)

// TestIdleSessionCloses: a session unused for IdleTimeout is closed and
// gives its tenant's slot back.
func TestIdleSessionCloses(t *testing.T) {
	hh := newHTTP(t, client.New("http://127.0.0.1:1", "tok"), mcp.HTTPConfig{MaxSessions: 1, IdleTimeout: 300 * time.Millisecond})
	if _, err := hh.connect(t, "acme"); err != nil {
		t.Fatal(err)
	}
	if n := hh.h.Sessions("acme"); n != 1 {
		t.Fatalf("%d sessions open after a connect, want 1", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for hh.h.Sessions("acme") > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := hh.h.Sessions("acme"); n != 0 {
		t.Fatalf("%d sessions still open after the idle timeout", n)
	}
	if len(mcp.SessionsForTest(hh.h)) != 0 {
		t.Fatal("the closed session's id is still served")
	}
	if _, err := hh.connect(t, "acme"); err != nil {
		t.Fatalf("the idle session's slot was not given back: %v", err)
	}
}
