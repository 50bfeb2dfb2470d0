package netns

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/errdefs"
)

// Each sandbox gets its own /30, eth0 with its address and a default
// route via the router's end, no IPv6; Attach is idempotent; Detach
// removes the namespace and takes unknown ids.
func TestAttachDetach(t *testing.T) {
	r := newRouter(t)
	a, err := r.Attach("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.Attach("b")
	if err != nil {
		t.Fatal(err)
	}
	if a.Addr != netip.MustParseAddr("10.203.0.2") || a.Gateway != netip.MustParseAddr("10.203.0.1") || a.Prefix != 30 ||
		b.Addr != netip.MustParseAddr("10.203.0.6") || b.Gateway != netip.MustParseAddr("10.203.0.5") {
		t.Errorf("links %+v %+v", a, b)
	}
	if again, err := r.Attach("a"); err != nil || again != a {
		t.Errorf("Attach again = %+v, %v; want %+v", again, err, a)
	}
	out := nsenter(t, a.NetNS, "ip -o addr; ip route")
	for _, want := range []string{"eth0    inet 10.203.0.2/30", "default via 10.203.0.1 dev eth0", "lo    inet 127.0.0.1/8"} {
		if !strings.Contains(out, want) {
			t.Errorf("sandbox namespace lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "inet6") {
		t.Errorf("IPv6 in the sandbox namespace:\n%s", out)
	}
	if v := nsenter(t, a.NetNS, "cat /proc/sys/net/ipv6/conf/eth0/disable_ipv6"); strings.TrimSpace(v) != "1" {
		t.Errorf("eth0 disable_ipv6 = %q", v)
	}
	// The router has no link but lo and the veths: no way to the host.
	rout := nsenter(t, r.cfg.Dir+"/router", "ip -o link; ip route; cat /proc/sys/net/ipv4/ip_forward")
	if n := strings.Count(rout, "\n"); n != 6 || !strings.Contains(rout, "alias a") || !strings.Contains(rout, "alias b") || strings.Contains(rout, "default via") {
		t.Errorf("router namespace (%d lines):\n%s", n, rout)
	}
	if got := r.Links(); len(got) != 2 || got[0] != a || got[1] != b {
		t.Errorf("Links() = %+v", got)
	}
	if err := r.Detach("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a.NetNS); !os.IsNotExist(err) {
		t.Errorf("Detach left %s: %v", a.NetNS, err)
	}
	if _, ok := r.Link("a"); ok {
		t.Error("Link(a) after Detach")
	}
	// Its veth goes with the namespace, nothing holding it.
	if !eventually(func() bool { return strings.Count(nsenter(t, r.cfg.Dir+"/router", "ip -o link"), "\n") == 2 }) {
		t.Errorf("the router's links after Detach:\n%s", nsenter(t, r.cfg.Dir+"/router", "ip -o link"))
	}
	if err := r.Detach("a"); err != nil {
		t.Errorf("Detach of an unknown id: %v", err)
	}
	if _, err := r.Attach("../x"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Attach(../x) = %v", err)
	}
	// The freed /30 is used again.
	if c, err := r.Attach("c"); err != nil || c.Gateway != a.Gateway {
		t.Errorf("Attach(c) = %+v, %v; want gateway %s", c, err, a.Gateway)
	}
	if p, err := r.Isolated("n"); p != "" || err != nil {
		t.Errorf("Isolated = %q, %v", p, err)
	}
}

func nsenter(t testing.TB, ns, script string) string {
	t.Helper()
	out, err := exec.Command("nsenter", "--net="+ns, "sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("nsenter %s %s: %v\n%s", ns, script, err, out)
	}
	return string(out)
}

// Detach cuts a sandbox off at once even while its namespace lives on
// (its sandbox has not ended yet), and the /30 serves a new link at once.
func TestDetachWhileHeld(t *testing.T) {
	r := newRouter(t)
	ls := listen(t, r)
	a, err := r.Attach("a")
	if err != nil {
		t.Fatal(err)
	}
	held, _, err := openNS(a.NetNS) // as a running sandbox holds it
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := r.Detach("a"); err != nil {
		t.Fatal(err)
	}
	var probe error
	if err := inNS(held, func() error { probe = tcpProbe(a.Gateway.String() + ":3128"); return nil }); err != nil {
		t.Fatal(err)
	}
	if probe == nil {
		t.Error("a detached sandbox still reached the proxy")
	}
	c, err := r.Attach("c")
	if err != nil || c.Gateway != a.Gateway {
		t.Fatalf("Attach(c) = %+v, %v; want gateway %s", c, err, a.Gateway)
	}
	inLink(t, c, func() error { return tcpProbe(c.Gateway.String() + ":3128") })
	checkRecorded(t, "proxy", ls.proxy, []string{c.Addr.String() + " " + c.Gateway.String() + ":3128 probe " + c.Gateway.String() + ":3128"})
	held.Close()
	if !eventually(func() bool { return strings.Count(nsenter(t, r.cfg.Dir+"/router", "ip -o link"), "\n") == 2 }) {
		t.Errorf("the detached veth outlived its namespace:\n%s", nsenter(t, r.cfg.Dir+"/router", "ip -o link"))
	}
}

// A restarted service (a second Open on the same Dir) finds the router,
// its links and their namespaces, and removes what an interrupted Attach
// left; a second Open while the first is open is refused.
func TestReopen(t *testing.T) {
	r, reopen := newReopenable(t)
	a, err := r.Attach("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(r.cfg); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("a second Open while the first is open: %v", err)
	}
	// An Attach interrupted before its veth: a namespace file only.
	if err := newNS(r.nsPath("half"), setupSandbox); err != nil {
		t.Fatal(err)
	}
	ino := nsInode(t, a.NetNS)
	r = reopen()
	if got := r.Links(); len(got) != 1 || got[0] != a {
		t.Fatalf("Links() after reopen = %+v, want [%+v]", got, a)
	}
	if got, err := r.Attach("a"); err != nil || got != a {
		t.Errorf("Attach(a) after reopen = %+v, %v", got, err)
	}
	if nsInode(t, a.NetNS) != ino {
		t.Error("the reopened link is another namespace")
	}
	if _, err := os.Stat(r.nsPath("half")); !os.IsNotExist(err) {
		t.Errorf("the half-made namespace is still there: %v", err)
	}
	b, err := r.Attach("b")
	if err != nil || b.Gateway == a.Gateway {
		t.Errorf("Attach(b) after reopen = %+v, %v", b, err)
	}
	// The firewall is back: a connection from the surviving link reaches
	// the proxy, on a dual-stack listener ("tcp", [::]) in a namespace
	// with IPv6 off.
	l, err := r.Listen("tcp", ":3128")
	if err != nil {
		t.Fatal(err)
	}
	rec := tcpRecorder(t, l, false)
	inLink(t, a, func() error { return tcpProbe(a.Gateway.String() + ":3128") })
	if got := rec.lines(); len(got) != 1 || !strings.HasPrefix(got[0], a.Addr.String()+" ") {
		t.Errorf("the proxy after reopen received %q", got)
	}
}

func nsInode(t testing.TB, p string) uint64 {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// From inside a sandbox's namespace, as root: TCP anywhere reaches the
// transparent port with its original destination, TCP to the gateway's
// proxy port reaches the proxy, UDP to any :53 reaches DNS and its answer
// comes back from the address asked; other UDP, ICMP, IPv6, another
// sandbox's listeners and the host's loopback get nothing.
func TestFirewall(t *testing.T) {
	f := newFixture(t, "a", "b")
	ls, a, b := f.ls, f.a, f.b
	hostPort := f.hostPort
	res := map[string]string{}
	inLink(t, a, func() error {
		try := func(name string, f func() error) {
			if err := f(); err != nil {
				res[name] = err.Error()
			} else {
				res[name] = "ok"
			}
		}
		try("tcp-any", func() error { return tcpProbe("203.0.113.7:8080") })
		try("tcp-proxy", func() error { return tcpProbe(a.Gateway.String() + ":3128") })
		try("tcp-b", func() error { return tcpProbe(b.Addr.String() + ":7000") })
		try("tcp-host", func() error { return tcpProbe(a.Gateway.String() + ":" + hostPort) })
		try("udp-dns", func() error { return udpProbe("198.51.100.53:53", true) })
		try("udp-other", func() error { return udpProbe("198.51.100.53:5000", false) })
		try("udp-gw", func() error { return udpProbe(a.Gateway.String()+":5000", false) })
		try("udp-b", func() error { return udpProbe(b.Addr.String()+":7001", false) })
		try("icmp-gw", func() error { return rawPing(a.Gateway) })
		try("icmp-b", func() error { return rawPing(b.Addr) })
		try("tcp6", func() error {
			c, err := net.DialTimeout("tcp6", "[fd00::1]:80", time.Second)
			if err == nil {
				c.Close()
				return errors.New("an IPv6 connection was made")
			}
			return nil
		})
		return nil
	})
	for _, k := range []string{"tcp-any", "tcp-proxy", "tcp-b", "tcp-host", "udp-dns", "udp-other", "udp-gw", "udp-b", "icmp-gw", "icmp-b", "tcp6"} {
		if res[k] != "ok" {
			t.Errorf("probe %s: %s", k, res[k])
		}
	}
	src := a.Addr.String()
	wantTransparent := []string{
		src + " 203.0.113.7:8080 probe 203.0.113.7:8080",
		src + " " + b.Addr.String() + ":7000 probe " + b.Addr.String() + ":7000",
		src + " " + a.Gateway.String() + ":" + hostPort + " probe " + a.Gateway.String() + ":" + hostPort,
	}
	checkRecorded(t, "transparent", ls.transparent, wantTransparent)
	checkRecorded(t, "proxy", ls.proxy, []string{src + " " + a.Gateway.String() + ":3128 probe " + a.Gateway.String() + ":3128"})
	checkRecorded(t, "dns", ls.dns, []string{src + " probe 198.51.100.53:53"})
	f.checkSilent(t)
}

func checkRecorded(t *testing.T, name string, rec *recorder, want []string) {
	t.Helper()
	eventually(func() bool { return len(rec.lines()) >= len(want) })
	got := rec.lines()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s received:\n%s\nwant:\n%s", name, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// tcpProbe connects, sends "probe ADDR" and wants the listener's "ok".
func tcpProbe(addr string) error {
	c, err := net.DialTimeout("tcp4", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("probe " + addr + "\n")); err != nil {
		return err
	}
	buf := make([]byte, 3)
	if _, err := c.Read(buf); err != nil || string(buf) != "ok\n" {
		return errors.Join(errors.New("no ok back"), err)
	}
	return nil
}

// udpProbe sends "probe ADDR"; with wantReply it needs "ok" back from
// addr itself (the connected socket takes nothing else), else it wants
// silence.
func udpProbe(addr string, wantReply bool) error {
	c, err := net.Dial("udp4", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write([]byte("probe " + addr + "\n")); err != nil {
		return err
	}
	c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	buf := make([]byte, 16)
	n, err := c.Read(buf)
	switch {
	case wantReply && (err != nil || string(buf[:n]) != "ok\n"):
		return errors.Join(errors.New("no ok back"), err)
	case !wantReply && err == nil:
		return errors.New("a reply came back: " + string(buf[:n]))
	}
	return nil
}

// rawPing sends an ICMP echo request from a raw socket (we are root in
// this namespace) and wants no reply.
func rawPing(dst netip.Addr) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	pkt := []byte{8, 0, 0xf7, 0xfe, 0, 1, 0, 0} // checksum of the rest
	if err := unix.Sendto(fd, pkt, 0, &unix.SockaddrInet4{Addr: dst.As4()}); err != nil {
		return err
	}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 500000})
	buf := make([]byte, 256)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return nil // timed out: no reply
		}
		if n > 20 && buf[20] == 0 { // echo reply after the IP header
			return errors.New("an echo reply came back")
		}
	}
}

// A sandbox may send only from its own address: packets from another
// sandbox's address, the gateway's, or the /30's network and broadcast
// addresses never reach the proxy's DNS port; its own do.
func TestAntiSpoofing(t *testing.T) {
	f := newFixture(t, "a", "b")
	ls, a, b := f.ls, f.a, f.b
	forged := []netip.Addr{b.Addr, a.Gateway, a.Gateway.Prev(), a.Addr.Next(), netip.MustParseAddr("192.0.2.9")}
	inLink(t, a, func() error {
		for _, src := range append(forged, a.Addr) {
			if err := sendFrom(src, netip.MustParseAddrPort("198.51.100.53:53"), "from "+src.String()); err != nil {
				return err
			}
		}
		return nil
	})
	checkRecorded(t, "dns", ls.dns, []string{a.Addr.String() + " from " + a.Addr.String()})
	time.Sleep(300 * time.Millisecond) // let any forged packet that got through arrive
	checkRecorded(t, "dns", ls.dns, []string{a.Addr.String() + " from " + a.Addr.String()})
	f.checkSilent(t)
}

// sendFrom sends a UDP datagram with any source address, its IP header
// written by hand on a raw socket (we are root in this namespace).
func sendFrom(src netip.Addr, dst netip.AddrPort, msg string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW) // IP_HDRINCL implied
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	n := 28 + len(msg)
	pkt := make([]byte, n)
	pkt[0], pkt[8], pkt[9] = 0x45, 64, unix.IPPROTO_UDP // the kernel fills the id and the checksum
	binary.BigEndian.PutUint16(pkt[2:], uint16(n))
	s4, d4 := src.As4(), dst.Addr().As4()
	copy(pkt[12:], s4[:])
	copy(pkt[16:], d4[:])
	binary.BigEndian.PutUint16(pkt[20:], 40000)
	binary.BigEndian.PutUint16(pkt[22:], dst.Port())
	binary.BigEndian.PutUint16(pkt[24:], uint16(n-20)) // UDP checksum 0: none
	copy(pkt[28:], msg)
	return unix.Sendto(fd, pkt, 0, &unix.SockaddrInet4{Addr: d4})
}

// The router's ruleset, read back through netlink: one inet table with
// the chains and policies installFirewall makes, and nothing else.
func TestFirewallInstalled(t *testing.T) {
	r := newRouter(t)
	c, err := nftables.New(nftables.WithNetNSFd(int(r.ns.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	chains, err := c.ListChains()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ch := range chains {
		rules, err := c.GetRules(ch.Table, ch)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s/%s policy=%d rules=%d", ch.Table.Name, ch.Name, *ch.Policy, len(rules)))
	}
	want := []string{"reins/sources policy=1 rules=4", "reins/redirect policy=1 rules=4", "reins/input policy=0 rules=5", "reins/forward policy=0 rules=0"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("chains:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// OriginalDst works on a dual-stack listener ("tcp", [::]) too, where the
// redirected IPv4 connection arrives v4-mapped.
func TestOriginalDstDualStack(t *testing.T) {
	r := newRouter(t)
	l, err := r.Listen("tcp", ":3129")
	if err != nil {
		t.Fatal(err)
	}
	rec := tcpRecorder(t, l, true)
	a, err := r.Attach("a")
	if err != nil {
		t.Fatal(err)
	}
	inLink(t, a, func() error { return tcpProbe("203.0.113.7:8080") })
	checkRecorded(t, "transparent", rec, []string{a.Addr.String() + " 203.0.113.7:8080 probe 203.0.113.7:8080"})
}
