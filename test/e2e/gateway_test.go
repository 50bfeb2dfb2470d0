package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// callGateway is a program in the sandbox calling the model gateway with
// a key (the sandbox's own unless given), as the Anthropic SDK does: one
// Messages call, which the sandbox's script model answers "done".
func callGateway(key string) string {
	if key == "" {
		key = "$ANTHROPIC_API_KEY"
	}
	return `wget -qO- --header "x-api-key: ` + key + `" --header "content-type: application/json" --header "anthropic-version: 2023-06-01" ` +
		`--post-data '{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}' "$ANTHROPIC_BASE_URL/v1/messages" 2>&1`
}

// answered and refused tell a call's outcome from callGateway's output.
func answered(r result) bool { return r.code == 0 && strings.Contains(r.stdout, `"text":"done"`) }
func refused(r result) bool  { return r.code != 0 && strings.Contains(r.stdout, "401") }

// TestModelGateway: on each backend, under --network none and egress, a
// program in a sandbox made with --model-gateway reaches the service's
// gateway over the executor, which knows the sandbox it came from and
// takes its token (a script answers);
// another sandbox's token is refused; sandbox show says the gateway is on
// and never shows the token; after a kill -9 of the service, new
// connections are served by the next one; removing one sandbox leaves
// another's gateway serving.
func TestModelGateway(t *testing.T) {
	s := startService(t)
	scriptFile := filepath.Join(t.TempDir(), "turns.json")
	if err := os.WriteFile(scriptFile, []byte(`{"turns":[{"text":"done"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	type box struct{ id, token string }
	var boxes []box
	for _, backend := range backends {
		for _, mode := range []string{"none", "egress"} {
			t.Run(backend+"/"+mode, func(t *testing.T) {
				s.t = t
				id := s.create("--backend", backend, "--network", mode, "--model-gateway", "--model", "script:"+scriptFile)
				if r := s.sh(id, callGateway("")); !answered(r) {
					t.Fatalf("a call from the sandbox: %s; want the script's answer", r)
				}
				env := s.sh(id, "env").stdout
				token := envValue(env, "ANTHROPIC_API_KEY")
				if !strings.HasPrefix(token, "rgw_") || envValue(env, "OPENAI_API_KEY") != token || envValue(env, "OPENAI_BASE_URL") != "http://127.0.0.1:47070/v1" {
					t.Fatalf("the sandbox's env does not point at the gateway with one placeholder token:\n%s", env)
				}
				if mode == "egress" && !strings.Contains(","+envValue(env, "NO_PROXY")+",", ",127.0.0.1,") {
					t.Fatalf("under egress NO_PROXY does not keep the gateway off the proxy:\n%s", env)
				}
				show := s.must("sandbox", "show", id)
				if !strings.Contains(show, "gateway") || !strings.Contains(show, "on (model script:"+scriptFile+")") {
					t.Errorf("sandbox show:\n%s\nwant the gateway on with its model", show)
				}
				if j := s.must("sandbox", "show", id, "--json"); strings.Contains(j, token) || strings.Contains(j, "rgw_") {
					t.Errorf("sandbox show --json holds the token:\n%s", j)
				}
				boxes = append(boxes, box{id, token})
			})
		}
	}
	s.t = t
	if len(boxes) != 4 {
		t.FailNow()
	}

	// One sandbox's token, used from another, is refused.
	a, b := boxes[0], boxes[1]
	if r := s.sh(b.id, callGateway(a.token)); !refused(r) {
		t.Fatalf("a's token from b: %s; want 401", r)
	}

	// A provider's model is shown as given; a bad model is refused with
	// the rule.
	id := s.create("--model-gateway", "--model", "anthropic:claude-sonnet-4-5")
	if show := s.must("sandbox", "show", id); !strings.Contains(show, "on (model anthropic:claude-sonnet-4-5)") {
		t.Errorf("sandbox show of an anthropic: gateway:\n%s", show)
	}
	if r := s.run("sandbox", "create", "--model-gateway", "--model", "claude"); r.code == 0 || !strings.Contains(r.stderr, "has no provider") {
		t.Errorf("create with --model claude: %s", r)
	}
	if r := s.run("sandbox", "create", "--model", "anthropic:x"); r.code == 0 || !strings.Contains(r.stderr, "--model needs --model-gateway") {
		t.Errorf("create with --model alone: %s", r)
	}

	// kill -9: the sandboxes live on, and the next service serves their
	// new connections.
	s.kill9()
	s.start()
	for _, bx := range boxes {
		if r := s.sh(bx.id, "timeout 30 "+callGateway("")); !answered(r) {
			t.Fatalf("after a restart of the service: %s; want the script's answer", r)
		}
	}

	// rm ends one sandbox's gateway, not another's. (That a removed
	// sandbox's token is good nowhere is manager's TestGatewayGVisor and
	// TestGatewayRunc: from here it could only be tried from another
	// sandbox, where any other's token is refused already.)
	s.must("sandbox", "rm", a.id)
	if r := s.sh(b.id, callGateway("")); !answered(r) {
		t.Fatalf("b's own call after a was removed: %s; want the script's answer", r)
	}
	if r := s.sh(b.id, callGateway(a.token)); !refused(r) {
		t.Fatalf("a removed sandbox's token from b: %s; want 401", r)
	}
}

// envValue is the value of key in env's output ("" when not set).
func envValue(env, key string) string {
	for _, line := range strings.Split(env, "\n") {
		if v, ok := strings.CutPrefix(line, key+"="); ok {
			return v
		}
	}
	return ""
}
