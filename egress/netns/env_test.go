package netns

import (
	"bufio"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/internal/testenv"
	"github.com/reinsdev/reins/sandbox/oci"
)

func TestMain(m *testing.M) {
	oci.MaybeRunShim()
	goleak.VerifyTestMain(m)
}

// The ports the test listeners use in the router namespace (its own, so
// fixed ports collide with nothing).
var testPorts = Ports{Proxy: 3128, Transparent: 3129, DNS: 5353}

// newRouter opens a router on a new Dir and checks, when the test ends,
// that it left nothing: no mount under Dir, no new host link.
func newRouter(t testing.TB) *Router {
	r, _ := newReopenable(t)
	return r
}

// newReopenable is newRouter with a function that closes the router and
// opens Dir again (a restarted service); the test's end tears down the
// last one.
func newReopenable(t testing.TB) (*Router, func() *Router) {
	t.Helper()
	testenv.RequiresRoot(t)
	testenv.RequiresBinary(t, "ip", "iproute2")        // to inspect namespaces
	testenv.RequiresBinary(t, "nsenter", "util-linux") // and enter them
	dir := t.TempDir()
	before := hostLinks(t)
	r, err := Open(Config{Dir: dir, Ports: testPorts})
	if err != nil {
		t.Fatal(err)
	}
	reopen := func() *Router {
		t.Helper()
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if r, err = Open(r.cfg); err != nil {
			t.Fatal(err)
		}
		return r
	}
	t.Cleanup(func() {
		for _, l := range r.Links() {
			if err := r.Detach(l.ID); err != nil {
				t.Errorf("Detach(%s): %v", l.ID, err)
			}
		}
		if err := r.Destroy(); err != nil && !strings.Contains(err.Error(), "closed") {
			t.Errorf("Destroy: %v", err)
		}
		checkNoLeftovers(t, dir, before)
	})
	return r, reopen
}

func hostLinks(t testing.TB) []string {
	out, err := exec.Command("ip", "-o", "link").Output()
	if err != nil {
		t.Fatalf("ip link: %v", err)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			names = append(names, f[1])
		}
	}
	return names
}

func checkNoLeftovers(t testing.TB, dir string, linksBefore []string) {
	t.Helper()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mi), dir) {
		t.Errorf("mounts left under %s:\n%s", dir, grep(string(mi), dir))
	}
	if after := hostLinks(t); !slices.Equal(after, linksBefore) {
		t.Errorf("host links changed: before %v, after %v", linksBefore, after)
	}
	for _, p := range []string{"router", "ns"} {
		if _, err := os.Stat(filepath.Join(dir, p)); !os.IsNotExist(err) {
			t.Errorf("%s left in the router's Dir (%v)", p, err)
		}
	}
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// recorder keeps what reached a listener, one line each.
type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	r.got = append(r.got, s)
	r.mu.Unlock()
}

func (r *recorder) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// serve runs fn in a goroutine that the test waits for at its end, after
// closing c.
func serve(t testing.TB, c interface{ Close() error }, fn func()) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); fn() }()
	t.Cleanup(func() { c.Close(); wg.Wait() })
}

// tcpRecorder accepts on l, records "SRC DST LINE" for each connection
// (DST is OriginalDst when redirected, else the local address) and
// answers "ok".
func tcpRecorder(t testing.TB, l net.Listener, redirected bool) *recorder {
	rec := &recorder{}
	serve(t, l, func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			dst := c.LocalAddr().String()
			if redirected {
				d, err := OriginalDst(c)
				if err != nil {
					dst = "error: " + err.Error()
				} else {
					dst = d.String()
				}
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			rec.add(hostOf(c.RemoteAddr()) + " " + dst + " " + strings.TrimSpace(line))
			c.Write([]byte("ok\n"))
			c.Close()
		}
	})
	return rec
}

// udpRecorder records "SRC PAYLOAD" for each datagram and answers
// "ok" when reply is set.
func udpRecorder(t testing.TB, pc net.PacketConn, reply bool) *recorder {
	return packetRecorder(t, pc, func(p []byte, from net.Addr) string {
		if reply {
			pc.WriteTo([]byte("ok\n"), from)
		}
		return hostOf(from) + " " + strings.TrimSpace(string(p))
	})
}

// packetRecorder records what line makes of each packet read from pc
// ("" records nothing).
func packetRecorder(t testing.TB, pc net.PacketConn, line func(p []byte, from net.Addr) string) *recorder {
	rec := &recorder{}
	serve(t, pc, func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if l := line(buf[:n], from); l != "" {
				rec.add(l)
			}
		}
	})
	return rec
}

// icmpRecorder is a raw ICMP socket in the calling thread's namespace: it
// sees every ICMP packet delivered locally (after the input hook).
func icmpRecorder(t testing.TB, r *Router, ns *os.File) *recorder {
	var fd int
	err := inNS(ns, func() (err error) {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "icmp")
	pc, err := net.FilePacketConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	return packetRecorder(t, pc, func(p []byte, from net.Addr) string {
		if len(p) > 0 && p[0] == 8 { // echo request
			return hostOf(from) + " echo"
		}
		return ""
	})
}

func hostOf(a net.Addr) string {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return a.String()
	}
	return ap.Addr().String()
}

// listeners are the test's stand-ins for the proxy, in the router.
type listeners struct {
	proxy, transparent, dns, udpOther, icmp *recorder
}

func listen(t testing.TB, r *Router) listeners {
	t.Helper()
	tl := func(port int) net.Listener {
		l, err := r.Listen("tcp4", netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(port)).String())
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	ul := func(port int) net.PacketConn {
		pc, err := r.ListenPacket("udp4", netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(port)).String())
		if err != nil {
			t.Fatal(err)
		}
		return pc
	}
	return listeners{
		proxy:       tcpRecorder(t, tl(testPorts.Proxy), false),
		transparent: tcpRecorder(t, tl(testPorts.Transparent), true),
		dns:         udpRecorder(t, ul(testPorts.DNS), true),
		udpOther:    udpRecorder(t, ul(5000), true),
		icmp:        icmpRecorder(t, r, r.ns),
	}
}

// inLink runs f in sandbox l's namespace.
func inLink(t testing.TB, l Link, f func() error) {
	t.Helper()
	ns, ok, err := openNS(l.NetNS)
	if err != nil || !ok {
		t.Fatalf("opening %s: %v %v", l.NetNS, ok, err)
	}
	defer ns.Close()
	if err := inNS(ns, f); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond for a few seconds.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// fixture is a router with the test's listeners, sandbox a's link, and
// sandbox b's with listeners inside it (TCP :7000, UDP :7001, ICMP), and
// a listener on the host's loopback: what a's probes must not reach.
type fixture struct {
	r                       *Router
	ls                      listeners
	a, b                    Link
	bTCP, bUDP, bICMP, host *recorder
	hostPort                string
}

func newFixture(t testing.TB, idA, idB string) *fixture {
	t.Helper()
	f := &fixture{r: newRouter(t)}
	f.ls = listen(t, f.r)
	var err error
	if f.a, err = f.r.Attach(idA); err != nil {
		t.Fatal(err)
	}
	if f.b, err = f.r.Attach(idB); err != nil {
		t.Fatal(err)
	}
	inLink(t, f.b, func() error {
		l, err := net.Listen("tcp4", ":7000")
		if err != nil {
			return err
		}
		pc, err := net.ListenPacket("udp4", ":7001")
		if err != nil {
			return err
		}
		f.bTCP, f.bUDP = tcpRecorder(t, l, false), udpRecorder(t, pc, true)
		return nil
	})
	ns, _, err := openNS(f.b.NetNS)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	f.bICMP = icmpRecorder(t, f.r, ns)
	host, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.host, f.hostPort = tcpRecorder(t, host, false), strconv.Itoa(host.Addr().(*net.TCPAddr).Port)
	return f
}

// checkSilent fails the test if anything reached what a must not reach:
// the router's other UDP port and ICMP, b's listeners, the host's.
func (f *fixture) checkSilent(t testing.TB) {
	t.Helper()
	for name, rec := range map[string]*recorder{"router udp :5000": f.ls.udpOther, "router icmp": f.ls.icmp,
		"b tcp": f.bTCP, "b udp": f.bUDP, "b icmp": f.bICMP, "host loopback": f.host} {
		if got := rec.lines(); len(got) > 0 {
			t.Errorf("%s received %q", name, got)
		}
	}
}
