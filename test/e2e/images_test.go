package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestBusyboxNetworkTools: in the busybox image, on both backends, wget
// with a timeout fetches from busybox httpd on the sandbox's loopback and
// gives up on a listener that accepts and stays silent after about the
// timeout, with an error rather than a segfault (Debian's busybox crashed
// on -T, docs/decisions/0024-busybox-wget.md); nc, ip and nslookup
// work, ping is there (without CAP_NET_RAW it cannot send).
func TestBusyboxNetworkTools(t *testing.T) {
	s := startService(t)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			s.t = t
			id := s.create("--backend", backend)
			defer s.run("sandbox", "rm", id)
			out := s.must("sandbox", "exec", id, "--", "sh", "-c",
				"mkdir -p /tmp/www && echo hello from httpd > /tmp/www/f && httpd -p 127.0.0.1:8080 -h /tmp/www && "+
					"wget -q -T 2 -O - http://127.0.0.1:8080/f")
			if out != "hello from httpd\n" {
				t.Errorf("wget -T 2 from httpd: %q", out)
			}

			// nc accepts, its stdin (a sleeping pipe) says nothing.
			s.must("sandbox", "exec", id, "--", "sh", "-c", "(sleep 60 | nc -l -p 8081 >/dev/null 2>&1 &) ; sleep 0.3")
			start := time.Now()
			r := s.run("sandbox", "exec", id, "--", "wget", "-T", "1", "-O", "/dev/null", "http://127.0.0.1:8081/x")
			took := time.Since(start)
			if r.code != 1 || !strings.Contains(r.stderr, "download timed out") {
				t.Errorf("wget -T 1 against a silent listener: %s", r)
			}
			if took < 900*time.Millisecond || took > 4*time.Second {
				t.Errorf("wget -T 1 against a silent listener ended after %v", took)
			}
			t.Logf("%s: wget -T 1 gave up after %v", backend, took.Round(time.Millisecond))

			if out := s.must("sandbox", "exec", id, "--", "ip", "-4", "addr", "show", "lo"); !strings.Contains(out, "inet 127.0.0.1/8") {
				t.Errorf("ip addr show lo: %q", out)
			}
			// busybox ping needs a raw socket, and a sandbox has no
			// CAP_NET_RAW (sandbox/oci/spec.go; issue 9 refuses ICMP out):
			// it is there and says why it cannot send.
			if r := s.run("sandbox", "exec", id, "--", "ping", "-c", "1", "-W", "2", "127.0.0.1"); r.code != 1 || !strings.Contains(r.stderr, "permission denied") {
				t.Errorf("ping 127.0.0.1: %s", r)
			}
			// No DNS server answers here: nslookup says so and exits 1.
			if r := s.run("sandbox", "exec", id, "--", "nslookup", "-timeout=1", "example.test", "127.0.0.1"); r.code != 1 || !strings.Contains(r.stdout+r.stderr, "127.0.0.1") {
				t.Errorf("nslookup: %s", r)
			}
			if out := s.must("sandbox", "exec", id, "--", "sh", "-c", "test -f /etc/resolv.conf && test ! -L /etc/resolv.conf && cat /etc/hosts"); !strings.Contains(out, "127.0.0.1\tlocalhost") {
				t.Errorf("/etc/hosts: %q", out)
			}
		})
	}
}
