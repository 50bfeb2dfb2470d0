package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// callGateway is a program in the sandbox calling the model gateway with
// a key (the sandbox's own unless given), as the Anthropic SDK does.
func callGateway(key string) string {
	if key == "" {
		key = "$ANTHROPIC_API_KEY"
	}
	return `wget -qO- --header "x-api-key: ` + key + `" "$ANTHROPIC_BASE_URL/v1/messages"`
}

// TestModelGateway: on each backend, under --network none and egress, a
// program in a sandbox made with --model-gateway reaches the service's
// gateway handler (the test's echo, REINS_TEST_GATEWAY_ECHO) over the
// executor, which names the sandbox it came from and takes its token;
// another sandbox's token is refused; sandbox show says the gateway is on
// and never shows the token; after a kill -9 of the service, new
// connections are served by the next one.
func TestModelGateway(t *testing.T) {
	s := startServiceEnv(t, []string{"REINS_TEST_GATEWAY_ECHO=1"})
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
				id := s.create("--backend", backend, "--network", mode, "--model-gateway", "--model", "anthropic:claude-sonnet-4-5")
				want := "sandbox=" + id + " auth=true path=/v1/messages\n"
				if r := s.sh(id, callGateway("")); r.code != 0 || r.stdout != want {
					t.Fatalf("a call from the sandbox: %s; want %q", r, want)
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
				if !strings.Contains(show, "gateway") || !strings.Contains(show, "on (model anthropic:claude-sonnet-4-5)") {
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
	if r := s.sh(b.id, callGateway(a.token)); r.stdout != "sandbox="+b.id+" auth=false path=/v1/messages\n" {
		t.Fatalf("a's token from b: %s", r)
	}

	// A script: model is read by the CLI and sent inline; a bad model is
	// refused with the rule.
	id := s.create("--model-gateway", "--model", "script:"+scriptFile)
	if show := s.must("sandbox", "show", id); !strings.Contains(show, "on (model script:"+scriptFile+")") {
		t.Errorf("sandbox show of a script: gateway:\n%s", show)
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
		want := "sandbox=" + bx.id + " auth=true path=/v1/messages\n"
		if r := s.sh(bx.id, "timeout 30 "+callGateway("")); r.stdout != want {
			t.Fatalf("after a restart of the service: %s; want %q", r, want)
		}
	}

	// rm ends the sandbox and its gateway: its token is good nowhere.
	s.must("sandbox", "rm", a.id)
	if r := s.sh(b.id, callGateway(a.token)); r.stdout != "sandbox="+b.id+" auth=false path=/v1/messages\n" {
		t.Fatalf("a removed sandbox's token from b: %s", r)
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
