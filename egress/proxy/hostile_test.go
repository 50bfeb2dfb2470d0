package proxy

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/reinsdev/reins/egress"
)

// slowDNS is a real DNS server on loopback that answers each query only
// after delay (an attacker's authoritative server that stalls), and a
// resolver that asks it. Its cleanup waits for the answers it owes, so
// the resolver's lookups end.
func slowDNS(t *testing.T, delay time.Duration) *net.Resolver {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup // the answers owed
	done := make(chan struct{})
	// The reader stops first (a deadline, not a close: the answers
	// owed still need the socket), so no wg.Add races the Wait.
	t.Cleanup(func() { pc.SetReadDeadline(time.Now()); <-done; wg.Wait(); pc.Close() })
	go func() {
		defer close(done)
		for {
			buf := make([]byte, 1500)
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var q dnsmessage.Message
			if q.Unpack(buf[:n]) != nil || len(q.Questions) != 1 {
				continue
			}
			wg.Add(1)
			time.AfterFunc(delay, func() {
				defer wg.Done()
				r := dnsmessage.Message{Header: dnsmessage.Header{ID: q.ID, Response: true}, Questions: q.Questions}
				if q.Questions[0].Type == dnsA {
					r.Answers = []dnsmessage.Resource{{Header: dnsmessage.ResourceHeader{Name: q.Questions[0].Name, Type: dnsA, Class: dnsmessage.ClassINET, TTL: 1},
						Body: &dnsmessage.AResource{A: [4]byte{192, 0, 2, 1}}}}
				}
				b, _ := r.Pack()
				pc.WriteTo(b, from)
			})
		}
	}()
	addr := pc.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
}

// One sandbox flooding the DNS with names that resolve slowly (a
// wildcard it may look up, under a server that never answers) must not
// hold up the DNS of another sandbox: the in-flight lookups are bounded
// per sandbox, and the loop that reads queries never waits on them.
func TestDNSFloodOfSlowNamesDoesNotStallOtherSandboxes(t *testing.T) {
	res := slowDNS(t, 1500*time.Millisecond)
	e := newEnv(t, allowHosts("*.slow.test"), nil, func(c *Config) { c.Resolver = res })
	e.override("good.test", localhost)
	if err := e.p.Add(Sandbox{ID: "sb-victim", Addr: otherAddr, Rules: allowHosts("good.test")}); err != nil {
		t.Fatal(err)
	}
	flood, err := net.ListenPacket("udp", net.JoinHostPort(sbAddr.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer flood.Close()
	to, _ := net.ResolveUDPAddr("udp", e.dnsAddr)
	for i := range 300 {
		m := dnsmessage.Message{Header: dnsmessage.Header{ID: uint16(i), RecursionDesired: true},
			Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName("x" + strconv.Itoa(i) + ".slow.test."), Type: dnsA, Class: dnsmessage.ClassINET}}}
		b, _ := m.Pack()
		if _, err := flood.WriteTo(b, to); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // the flood is read first
	start := time.Now()
	a := e.queryFrom(t, otherAddr, "good.test.", dnsA, true)
	if took := time.Since(start); took > time.Second {
		t.Errorf("the other sandbox's query took %s behind the flood", took)
	}
	if a.rcode != dnsmessage.RCodeSuccess || len(a.addrs) != 1 {
		t.Errorf("the other sandbox's answer: %+v", a)
	}
	// The flooding sandbox is told to retry (SERVFAIL) over its limit,
	// at once, and that is in its log.
	flood.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 1500)
	n, _, err := flood.ReadFrom(buf)
	if err != nil {
		t.Fatalf("no reply to the flood over its limit: %v", err)
	}
	var r dnsmessage.Message
	if err := r.Unpack(buf[:n]); err != nil || r.RCode != dnsmessage.RCodeServerFailure {
		t.Fatalf("reply over the limit: %v %+v", err, r.Header)
	}
	e.waitEntries(func(es []egress.Entry) bool {
		for _, en := range es {
			if en.Sandbox == "sb-test" && strings.HasPrefix(en.Rule, "too many DNS queries in flight") {
				return true
			}
		}
		return false
	})
}

// TRACE asks the server to send the request back as it got it (Apache
// does by default): a secret injected into one would hand its value to
// the sandbox. The proxy does not inject into a TRACE, and logs the
// placeholder it left.
func TestTraceGetsNoSecret(t *testing.T) {
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := httputil.DumpRequest(r, false)
		w.Header().Set("Content-Type", "message/http")
		w.Write(b)
	}))
	defer echo.Close()
	sec := testSecret("example.com")
	e := newEnv(t, allowHosts("example.com"), []Secret{sec})
	e.override("example.com", localhost)
	port := strconv.Itoa(int(netip.MustParseAddrPort(echo.Listener.Addr().String()).Port()))
	c := e.raw(sbAddr)
	defer c.Close()
	br := bufio.NewReader(c)
	_, body := roundTrip(t, c, br, "TRACE http://example.com:"+port+"/ HTTP/1.1\r\nHost: example.com\r\n"+
		"Authorization: Bearer "+sec.Placeholder+"\r\n\r\n")
	if strings.Contains(body, secretValue) {
		t.Fatalf("the secret's value came back to the sandbox: %q", body)
	}
	if !strings.Contains(body, sec.Placeholder) {
		t.Fatalf("not the echo of the request: %q", body)
	}
	en := e.entryFor("example.com")
	if !strings.Contains(en.Note, "not replaced") {
		t.Errorf("entry %+v", en)
	}
	e.noSecretValue()
}

// An allowed host that answers with endless response headers must not
// make the proxy hold them all in memory: it gives up past its bound,
// closes the upstream and tells the client.
func TestEndlessResponseHeadersBounded(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	wrote := make(chan int64, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			wrote <- -1
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		http.ReadRequest(br)
		var n int64
		line := []byte("X-Pad: " + strings.Repeat("a", 4000) + "\r\n")
		w, _ := c.Write([]byte("HTTP/1.1 200 OK\r\n"))
		n += int64(w)
		for n < 256<<20 {
			c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			w, err := c.Write(line)
			n += int64(w)
			if err != nil {
				break
			}
		}
		wrote <- n
	}()
	e := newEnv(t, allowHosts("big.test"), nil)
	e.override("big.test", localhost)
	c := e.raw(sbAddr)
	br := bufio.NewReader(c)
	port := strconv.Itoa(int(netip.MustParseAddrPort(l.Addr().String()).Port()))
	resp, body := roundTrip(t, c, br, "GET http://big.test:"+port+"/ HTTP/1.1\r\nHost: big.test\r\n\r\n")
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "headers") {
		t.Errorf("status %d: %q", resp.StatusCode, body)
	}
	if n := <-wrote; n < 0 || n >= 256<<20 {
		t.Errorf("the upstream wrote %d bytes of headers before the proxy gave up", n)
	} else {
		t.Logf("the proxy gave up after %d bytes of headers", n)
	}
}

// An operator's name trusted on one port (serve --egress-resolve
// NAME=127.0.0.1:PORT) is not a way to every loopback port of the host:
// a tenant allowed the name on any port reaches only that one.
func TestOverridePortsBoundTheTrust(t *testing.T) {
	good, other := newTCPRecorder(t), newTCPRecorder(t)
	e := newEnv(t, allowHosts("mirror.test"), nil)
	e.override("mirror.test", localhost)
	e.p.mu.Lock()
	e.p.cfg.OverridePorts = map[string][]int{"mirror.test": {good.port()}}
	e.p.mu.Unlock()
	for _, c := range []struct {
		port int
		want int
	}{{good.port(), 200}, {other.port(), 403}} {
		conn := e.raw(sbAddr)
		resp, _ := roundTrip(t, conn, bufio.NewReader(conn), "CONNECT mirror.test:"+strconv.Itoa(c.port)+" HTTP/1.1\r\n\r\n")
		conn.Close()
		if resp.StatusCode != c.want {
			t.Errorf("CONNECT mirror.test:%d: %d, want %d", c.port, resp.StatusCode, c.want)
		}
	}
	if n, _ := other.seen(); n != 0 {
		t.Errorf("a loopback port the operator did not name was reached (%d connections)", n)
	}
}

// A bound host that sends the request back in its response's headers (a
// redirect that keeps the URL, a header that echoes one) does not give the
// sandbox the secret's value: the proxy puts the placeholder back.
func TestEchoedSecretIsScrubbedFromResponseHeaders(t *testing.T) {
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/login?next="+url.QueryEscape(r.URL.RequestURI()))
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		w.WriteHeader(http.StatusFound)
	}))
	defer echo.Close()
	sec := testSecret("example.com")
	e := newEnv(t, allowHosts("example.com"), []Secret{sec})
	e.override("example.com", localhost)
	port := strconv.Itoa(int(netip.MustParseAddrPort(echo.Listener.Addr().String()).Port()))
	c := e.raw(sbAddr)
	defer c.Close()
	resp, _ := roundTrip(t, c, bufio.NewReader(c), "GET http://example.com:"+port+"/x?key="+sec.Placeholder+" HTTP/1.1\r\nHost: example.com\r\n"+
		"Authorization: Bearer "+sec.Placeholder+"\r\n\r\n")
	for k, vs := range resp.Header {
		for _, v := range vs {
			if strings.Contains(v, secretValue) || strings.Contains(v, url.QueryEscape(secretValue)) {
				t.Errorf("response header %s carries the secret's value: %q", k, v)
			}
		}
	}
	if !strings.Contains(resp.Header.Get("X-Echo"), sec.Placeholder) || !strings.Contains(resp.Header.Get("Location"), sec.Placeholder) {
		t.Errorf("the echo did not come back with the placeholder: %v", resp.Header)
	}
}

// A forbidden listener on every interface (the service's API on
// 0.0.0.0:PORT) keeps sandboxes off that port of this host's own
// addresses, not off that port of every host.
func TestForbiddenUnspecifiedIsThisHostOnly(t *testing.T) {
	p := New(Config{Forbidden: []netip.AddrPort{netip.MustParseAddrPort("0.0.0.0:7070")}})
	defer p.Close()
	for _, c := range []struct {
		addr string
		want bool
	}{{"127.0.0.1:7070", true}, {"[::1]:7070", true}, {"127.0.0.1:7071", false}, {"93.184.215.14:7070", false}} {
		if got := p.forbidden(netip.MustParseAddrPort(c.addr)); got != c.want {
			t.Errorf("forbidden(%s) = %v, want %v", c.addr, got, c.want)
		}
	}
}
