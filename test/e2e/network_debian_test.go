package e2e

import (
	"net/url"
	"strings"
	"testing"

	"github.com/reinsdev/reins/internal/mirrortest"
	"github.com/reinsdev/reins/internal/testenv"
)

// TestDebianThroughTheProxy: in the debian image, apt-get, pip, npm and
// git install from package sources (stand-ins on the host, named for the
// proxy with --egress-resolve) through the egress proxy, with only those
// names allowed; and HTTPS to a host a secret is bound to verifies against
// the sandbox's own CA (terminated by the proxy) in curl, Python and Node,
// with the secret put in on the way.
func TestDebianThroughTheProxy(t *testing.T) {
	testenv.RequiresBinary(t, "debootstrap", "debootstrap")
	requireSandboxes(t)
	m := mirrortest.Start(t)
	ca := newTestCA(t)
	tlsRec := newRecorder(t, ca.leaf(t, "secret.test"))
	args := []string{"--egress-resolve", "secret.test=127.0.0.1"}
	for _, tool := range mirrortest.Tools {
		args = append(args, "--egress-resolve", string(tool)+".mirror.test=127.0.0.1")
	}
	s := startServiceEnv(t, []string{"SSL_CERT_FILE=" + ca.file}, args...)
	const secretValue = "deb-e2e-secret-0099"
	s.setSecret("API_TOKEN", secretValue)
	tp := tlsRec.port()
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			s.t = t
			id := s.create("--backend", backend, "--image", "debian", "--allow-host", "*.mirror.test",
				"--allow-host", "secret.test:"+tp, "--secret", "API_TOKEN=secret.test")
			for _, tool := range mirrortest.Tools {
				src := m.Source(tool)
				u, _ := url.Parse(src.URL)
				base := "http://" + string(tool) + ".mirror.test:" + u.Port()
				before := len(src.Requests())
				r := s.run("sandbox", "exec", "--timeout", "3m", id, "--", "sh", "-c", mirrortest.Command(tool, base))
				if r.code != 0 || !strings.Contains(r.stdout, mirrortest.Marker(tool)) {
					t.Errorf("%s through the proxy: %s", tool, r)
					continue
				}
				reqs := src.Requests()[before:]
				if len(reqs) == 0 || !strings.HasPrefix(reqs[0].Host, string(tool)+".mirror.test") {
					t.Errorf("%s: the source saw %+v", tool, reqs)
				}
			}
			// TLS terminated with the sandbox's CA: curl, Python and Node
			// verify it (no -k), and the secret reaches the host.
			url := "https://secret.test:" + tp
			for name, script := range map[string]string{
				"curl":   `curl -sS -f -H "Authorization: Bearer $API_TOKEN" ` + url + `/curl`,
				"python": `python3 -c 'import os,urllib.request as u; r=u.Request("` + url + `/python", headers={"Authorization": "Bearer "+os.environ["API_TOKEN"]}); print(u.urlopen(r).read().decode())'`,
				"node":   `node -e 'require("https").get("` + url + `/node", {headers: {Authorization: "Bearer "+process.env.API_TOKEN}}, r => r.pipe(process.stdout)).on("error", e => {console.error(e.message); process.exit(1)})'`,
			} {
				if r := s.sh(id, script); r.code != 0 || !strings.Contains(r.stdout, "reached /"+name) {
					t.Errorf("%s over TLS to a host with a secret: %s", name, r)
				}
				if h := tlsRec.hits("/" + name); len(h) != 1 || h[0].Header.Get("Authorization") != "Bearer "+secretValue {
					t.Errorf("%s: the host got %+v, want the secret's value", name, h)
				}
				tlsRec.mu.Lock()
				tlsRec.got = nil
				tlsRec.mu.Unlock()
			}
			// A host not listed stays out, for these tools too.
			if r := s.sh(id, "curl -sS -f -m 5 http://pypi.org/simple/"); r.code == 0 {
				t.Errorf("curl to an unlisted host: %s", r)
			}
			s.must("sandbox", "rm", id)
		})
	}
}
