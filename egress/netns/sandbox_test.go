package netns

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reinsdev/reins/internal/testenv"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/gvisor"
	"github.com/reinsdev/reins/sandbox/runc"
	"github.com/reinsdev/reins/sandbox/sandboxtest"
)

// backends are the real sandbox backends the boundary is checked on.
var backends = []struct {
	name string
	new  func(t testing.TB, stateDir string) sandbox.Backend
}{
	{"runc", func(t testing.TB, stateDir string) sandbox.Backend {
		testenv.RequiresBinary(t, "runc", "runc")
		b, err := runc.New(stateDir)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}},
	{"gvisor", func(t testing.TB, stateDir string) sandbox.Backend {
		testenv.RequiresRunsc(t, gvisor.DefaultRunsc())
		b, err := gvisor.New(stateDir)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}},
}

// sandboxRootfs is a busybox rootfs with the probe program as /bin/probe.
func sandboxRootfs(t testing.TB) string {
	t.Helper()
	rootfs := t.TempDir()
	sandboxtest.BusyboxRootfs(t, rootfs)
	cmd := exec.Command("go", "build", "-o", filepath.Join(rootfs, "bin", "probe"), "./testdata/probe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the probe: %v\n%s", err, out)
	}
	return rootfs
}

// startScript starts a sandbox running script with /ctl bound to a host
// directory, waits for the script to touch /ctl/done, and returns that
// directory. The sandbox is deleted when the test ends.
func startScript(t testing.TB, backend sandbox.Backend, rootfs, netns, script string) string {
	t.Helper()
	ctl := t.TempDir()
	ctx := context.Background()
	b := sandbox.Bundle{ID: sandboxtest.NewID("net"), Dir: t.TempDir(), Rootfs: rootfs, NetNS: netns,
		Args:   []string{"sh", "-c", script + "; touch /ctl/done; sleep 1000"},
		Mounts: []sandbox.Mount{{Source: ctl, Target: "/ctl"}}}
	if _, err := backend.Start(ctx, b); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := backend.Delete(context.Background(), b.ID); err != nil {
			t.Errorf("Delete: %v", err)
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(ctl, "done")); err == nil {
			return ctl
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(filepath.Join(b.Dir, "init.log"))
			t.Fatalf("the sandbox's script did not finish; its log:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// On both backends, a real sandbox in a namespace from Attach: every TCP
// connection reaches the transparent port (with its original destination)
// or, to the gateway's proxy port, the proxy; UDP to any :53 reaches the
// DNS port and its answer comes back; other UDP, ICMP and IPv6 reach
// nothing, nor do sandbox B's listeners or the host's loopback; and the
// sandbox cannot change its address or routes.
func TestSandboxBoundary(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			f := newFixture(t, sandboxtest.NewID("a"), sandboxtest.NewID("b"))
			ls, a, b, hostPort := f.ls, f.a, f.b, f.hostPort
			backend := bk.new(t, t.TempDir())
			rootfs := sandboxRootfs(t)
			// Ping sockets for root inside (runc has no CAP_NET_RAW), so
			// the echo request is really sent.
			inLink(t, a, func() error { return sysctls(map[string]string{"ipv4/ping_group_range": "0 2147483647"}) })

			gw, addrB := a.Gateway.String(), b.Addr.String()
			probes := []string{"tcp=203.0.113.7:8080", "tcp=" + gw + ":3128", "tcp=" + addrB + ":7000", "tcp=" + gw + ":" + hostPort,
				"tcp=127.0.0.1:" + hostPort, "udp=198.51.100.53:53", "udp=198.51.100.53:5000", "udp=" + gw + ":5000",
				"udp=" + addrB + ":7001", "icmp=" + gw, "icmp=" + addrB, "icmp=198.51.100.53", "tcp6=[fd00::1]:80", "udp6=[fd00::1]:53"}
			script := "probe " + strings.Join(probes, " ") + " > /ctl/probes 2>&1; " +
				"ip addr add 10.203.0.9/30 dev eth0 > /ctl/ip 2>&1; echo addr=$? >> /ctl/ip; " +
				"ip route add 192.0.2.0/24 via " + gw + " >> /ctl/ip 2>&1; echo route=$? >> /ctl/ip"
			ctl := startScript(t, backend, rootfs, a.NetNS, script)

			out, _ := os.ReadFile(filepath.Join(ctl, "probes"))
			t.Logf("probes:\n%s", out)
			got := map[string]string{}
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				if f := strings.SplitN(line, " ", 3); len(f) == 3 {
					got[f[0]+"="+f[1]] = f[2]
				}
			}
			for _, p := range probes {
				want := "sent" // silence: nothing answered
				switch {
				case strings.HasPrefix(p, "tcp=127."):
					want = "error: dial tcp 127.0.0.1:" + hostPort + ": connect: connection refused"
				case strings.HasPrefix(p, "tcp6") || strings.HasPrefix(p, "udp6"):
					want = "error: "
				case strings.HasPrefix(p, "tcp=") || strings.HasSuffix(p, ":53"):
					want = "sent reply=ok"
				}
				if g := got[p]; !strings.HasPrefix(g, want) || (want == "sent" && g != "sent") {
					t.Errorf("probe %s: %q, want %q", p, g, want)
				}
			}
			src := a.Addr.String()
			msg := func(kind, target string) string { return "probe " + kind + " " + target }
			checkRecorded(t, "transparent", ls.transparent, []string{
				src + " 203.0.113.7:8080 " + msg("tcp", "203.0.113.7:8080"),
				src + " " + addrB + ":7000 " + msg("tcp", addrB+":7000"),
				src + " " + gw + ":" + hostPort + " " + msg("tcp", gw+":"+hostPort),
			})
			checkRecorded(t, "proxy", ls.proxy, []string{src + " " + gw + ":3128 " + msg("tcp", gw+":3128")})
			checkRecorded(t, "dns", ls.dns, []string{src + " " + msg("udp", "198.51.100.53:53")})
			f.checkSilent(t)

			ipOut, _ := os.ReadFile(filepath.Join(ctl, "ip"))
			t.Logf("ip inside:\n%s", ipOut)
			if strings.Contains(string(ipOut), "addr=0") || strings.Contains(string(ipOut), "route=0") {
				t.Errorf("the sandbox changed its network:\n%s", ipOut)
			}
			view := nsenter(t, a.NetNS, "ip -o addr; ip route")
			if strings.Contains(view, "10.203.0.9") || strings.Contains(view, "192.0.2.0") {
				t.Errorf("the sandbox's namespace changed:\n%s", view)
			}
		})
	}
}

// Without a namespace from the router a sandbox has loopback and nothing
// else, on both backends.
func TestSandboxLoopbackOnly(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			testenv.RequiresRoot(t)
			backend := bk.new(t, t.TempDir())
			rootfs := sandboxRootfs(t)
			script := "(nc -l -p 8000 > /ctl/got &); sleep 0.5; echo over-loopback | nc 127.0.0.1 8000; sleep 0.2; " +
				"ip -o link | grep -v ' lo:' > /ctl/links; probe tcp=203.0.113.7:80 udp=198.51.100.53:53 > /ctl/probes 2>&1"
			ctl := startScript(t, backend, rootfs, "", script)
			if got, _ := os.ReadFile(filepath.Join(ctl, "got")); strings.TrimSpace(string(got)) != "over-loopback" {
				t.Errorf("over loopback: %q", got)
			}
			if links, _ := os.ReadFile(filepath.Join(ctl, "links")); len(strings.TrimSpace(string(links))) > 0 {
				t.Errorf("links besides lo:\n%s", links)
			}
			probes, _ := os.ReadFile(filepath.Join(ctl, "probes"))
			for _, line := range strings.Split(strings.TrimSpace(string(probes)), "\n") {
				if !strings.Contains(line, "error: ") || !strings.Contains(line, "unreachable") {
					t.Errorf("probe without a network: %s", line)
				}
			}
			fmt.Fprint(os.Stderr, "")
		})
	}
}
