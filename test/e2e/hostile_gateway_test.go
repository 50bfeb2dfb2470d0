package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGatewayOneSandboxCannotStarveAnother: a program in sandbox A opens
// 16 model calls of unknown length (chunked) through the executor's
// tunnel and never sends their bodies; the gateway holds A to its share
// of the request bytes (the calls past it are answered 429 at once), so
// that sandbox B's call is still answered.
func TestGatewayOneSandboxCannotStarveAnother(t *testing.T) {
	s := startService(t)
	scriptFile := filepath.Join(t.TempDir(), "turns.json")
	if err := os.WriteFile(scriptFile, []byte(`{"turns":[{"text":"done"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	a := s.create("--backend", "gvisor", "--network", "none", "--model-gateway", "--model", "script:"+scriptFile)
	b := s.create("--backend", "gvisor", "--network", "none", "--model-gateway", "--model", "script:"+scriptFile)
	hold := `for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do ` +
		`(printf 'POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Api-Key: %s\r\nTransfer-Encoding: chunked\r\n\r\n' "$ANTHROPIC_API_KEY"; sleep 60) ` +
		`| nc 127.0.0.1 47070 > /tmp/held.$i 2>&1 & done; sleep 3`
	if r := s.sh(a, hold); r.code != 0 {
		t.Fatalf("sandbox A's 16 never-sent bodies: %s", r)
	}
	if r := s.sh(b, callGateway("")); !answered(r) {
		t.Errorf("sandbox B's call while A holds bodies: %s; want the script's answer", r)
	}
	r := s.sh(a, `cat /tmp/held.* | grep -c ' 429 '`)
	if n := strings.TrimSpace(r.stdout); n == "0" || n == "" {
		t.Errorf("sandbox A's 16 never-sent bodies: %s; want those past its share answered 429", r)
	}
}
