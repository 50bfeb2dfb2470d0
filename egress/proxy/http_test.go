package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reinsdev/reins/egress"
)

func TestAllowedHTTPReachesTheHostAndIsLogged(t *testing.T) {
	up, e := oneHost(t, "allowed.test", false)
	code, body := e.get("http://ALLOWED.test.:" + strconv.Itoa(up.port()) + "/a/b?c=d")
	if code != 200 || !strings.HasPrefix(body, "hello") {
		t.Fatalf("got %d %q", code, body)
	}
	got := up.got()
	if len(got) != 1 || got[0].RequestURI != "/a/b?c=d" {
		t.Fatalf("upstream saw %+v", got)
	}
	if _, ok := got[0].Header["Proxy-Connection"]; ok {
		t.Errorf("hop-by-hop header forwarded: %v", got[0].Header)
	}
	en := e.entryFor("allowed.test")
	if !en.Allowed || en.Proto != "http" || en.Rule != "allow-host allowed.test" || en.Port != up.port() ||
		en.Addr != "127.0.0.1:"+strconv.Itoa(up.port()) || en.BytesIn == 0 || en.BytesOut == 0 || en.Sandbox != "sb-test" {
		t.Errorf("entry %+v", en)
	}
}

func TestUnlistedHostIsRefusedAndNeverResolved(t *testing.T) {
	up := newRecorder(t, false)
	e := newEnv(t, allowHosts("allowed.test"), nil)
	e.res.set("evil.test", localhost)
	code, body := e.get("http://evil.test:" + strconv.Itoa(up.port()) + "/")
	if code != http.StatusForbidden || !strings.Contains(body, "not in the allowlist") {
		t.Fatalf("got %d %q", code, body)
	}
	if n := len(up.got()); n != 0 {
		t.Fatalf("the refused host got %d requests", n)
	}
	if c := e.res.calls(); len(c) != 0 {
		t.Fatalf("an unlisted name was resolved: %v", c)
	}
	if en := e.entryFor("evil.test"); en.Allowed || en.Rule != "not in the allowlist" {
		t.Errorf("entry %+v", en)
	}
}

// Every request of a kept-alive connection is decided on its own Host.
func TestKeepAliveEachRequestDecided(t *testing.T) {
	good, bad := newRecorder(t, false), newRecorder(t, false)
	e := newEnv(t, allowHosts("good.test"), nil)
	e.override("good.test", localhost)
	e.override("bad.test", localhost)
	c := e.raw(sbAddr)
	br := bufio.NewReader(c)
	wantStatus(t, c, br, "GET http://good.test:"+strconv.Itoa(good.port())+"/1 HTTP/1.1\r\nHost: good.test\r\n\r\n", 200)
	wantStatus(t, c, br, "GET http://bad.test:"+strconv.Itoa(bad.port())+"/2 HTTP/1.1\r\nHost: good.test\r\n\r\n", http.StatusForbidden)
	if len(good.got()) != 1 || len(bad.got()) != 0 {
		t.Fatalf("good saw %d, bad saw %d", len(good.got()), len(bad.got()))
	}

	// Redirected (origin form): the Host header decides, and a change of
	// Host on one connection is decided again.
	c = e.redirected(netip.AddrPortFrom(netip.MustParseAddr("198.51.100.7"), uint16(good.port())))
	br = bufio.NewReader(c)
	wantStatus(t, c, br, "GET /3 HTTP/1.1\r\nHost: good.test\r\n\r\n", 200)
	wantStatus(t, c, br, "GET /4 HTTP/1.1\r\nHost: bad.test\r\n\r\n", http.StatusForbidden)
	if len(good.got()) != 2 || len(bad.got()) != 0 {
		t.Fatalf("good saw %d, bad saw %d", len(good.got()), len(bad.got()))
	}
}

// An address written in any form is a bare address, refused in egress
// mode without a cidr, and reserved ones in open mode.
func TestAddressesInEveryFormAreBare(t *testing.T) {
	up := newRecorder(t, false)
	port := strconv.Itoa(up.port())
	forms := []string{"127.0.0.1", "2130706433", "0x7f000001", "0177.0.0.1", "127.1", "0x7f.1", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::1]"}
	for _, mode := range []egress.Mode{egress.ModeEgress, egress.ModeOpen} {
		e := newEnv(t, egress.Rules{Mode: mode}, nil)
		for _, f := range forms {
			c := e.raw(sbAddr)
			resp, body := roundTrip(t, c, bufio.NewReader(c), "GET http://"+f+":"+port+"/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s %s: %d %q", mode, f, resp.StatusCode, body)
			}
		}
		if c := e.res.calls(); len(c) != 0 {
			t.Errorf("%s: addresses were resolved as names: %v", mode, c)
		}
	}
	if n := len(up.got()); n != 0 {
		t.Fatalf("upstream got %d requests", n)
	}
	// A prefix (the admin's) lets the same address through.
	rules, err := egress.Rules{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}.Normalize(true)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, rules, nil)
	for _, f := range []string{"2130706433", "[::ffff:127.0.0.1]"} {
		c := e.raw(sbAddr)
		resp, body := roundTrip(t, c, bufio.NewReader(c), "GET http://"+f+":"+port+"/ HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.StatusCode != 200 {
			t.Errorf("with allow-cidr, %s: %d %q", f, resp.StatusCode, body)
		}
	}
	if en := e.entryFor(""); !en.Allowed || en.Rule != "allow-cidr 127.0.0.0/8" {
		t.Errorf("entry %+v", en)
	}
}

// A name the rules allow that resolves to a reserved address (DNS
// rebinding) is refused unless the operator named it or a cidr covers it.
func TestRebindingToReservedIsRefused(t *testing.T) {
	up := newRecorder(t, false)
	e := newEnv(t, allowHosts("rebind.test"), nil)
	e.res.set("rebind.test", localhost)
	code, body := e.get("http://rebind.test:" + strconv.Itoa(up.port()) + "/")
	if code != http.StatusForbidden || !strings.Contains(body, "reserved address 127.0.0.1 (loopback)") {
		t.Fatalf("got %d %q", code, body)
	}
	if len(up.got()) != 0 {
		t.Fatal("the reserved address was reached")
	}
	rules := allowHosts("rebind.test")
	rules.AllowCIDRs = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	if err := e.p.Update("sb-test", rules, nil); err != nil {
		t.Fatal(err)
	}
	if code, _ := e.get("http://rebind.test:" + strconv.Itoa(up.port()) + "/"); code != 200 || len(up.got()) != 1 {
		t.Fatalf("with a cidr: %d, upstream saw %d", code, len(up.got()))
	}
}

func TestHostileRequestTargets(t *testing.T) {
	up, e := oneHost(t, "allowed.test", false)
	e.override("denied.test", localhost)
	port := strconv.Itoa(up.port())
	for _, tc := range []struct{ name, raw string }{
		{"userinfo", "GET http://allowed.test@denied.test:" + port + "/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n"},
		{"userinfo with password", "GET http://u:p@allowed.test:" + port + "/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n"},
		{"https absolute form", "GET https://allowed.test:" + port + "/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n"},
		{"origin form to the explicit proxy", "GET / HTTP/1.1\r\nHost: allowed.test:" + port + "\r\n\r\n"},
		{"bad name", "GET http://allo_wed..test:" + port + "/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n"},
		{"zone", "GET http://[fe80::1%25lo]:" + port + "/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n"},
	} {
		c := e.raw(sbAddr)
		resp, body := roundTrip(t, c, bufio.NewReader(c), tc.raw)
		if resp.StatusCode < 400 || resp.StatusCode > 403 {
			t.Errorf("%s: %d %q", tc.name, resp.StatusCode, body)
		}
	}
	if n := len(up.got()); n != 0 {
		t.Fatalf("upstream got %d requests: %+v", n, up.got())
	}
}

func TestOversizedHeadersRefused(t *testing.T) {
	up := newRecorder(t, false)
	e := newEnv(t, allowHosts("allowed.test"), nil, func(c *Config) { c.MaxHeaderBytes = 8 << 10 })
	e.override("allowed.test", localhost)
	c := e.raw(sbAddr)
	go io.WriteString(c, "GET http://allowed.test:"+strconv.Itoa(up.port())+"/ HTTP/1.1\r\nHost: allowed.test\r\nX-Big: "+strings.Repeat("a", 64<<10)+"\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("got %d", resp.StatusCode)
	}
	if len(up.got()) != 0 {
		t.Fatal("upstream reached")
	}
}

// A client that sends a request's headers slowly, or nothing, is closed
// after the handshake timeout.
func TestSlowClientsAreClosed(t *testing.T) {
	e := newEnv(t, allowHosts("allowed.test"), nil, func(c *Config) { c.HandshakeTimeout = 300 * time.Millisecond })
	silent := e.raw(sbAddr)
	slow := e.raw(sbAddr)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		io.WriteString(slow, "GET http://allowed.test/ HTTP/1.1\r\n")
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				if _, err := io.WriteString(slow, "X: y\r\n"); err != nil {
					return
				}
			}
		}
	}()
	start := time.Now()
	closedWithin(t, silent, 3*time.Second)
	closedWithin(t, slow, 3*time.Second)
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("closed too soon (%v): not the timeout", d)
	}
	// Redirected connections too (past the wait for a server that speaks
	// first, a connection to nothing allowed is closed).
	r := e.redirected(netip.MustParseAddrPort("203.0.113.9:25"))
	closedWithin(t, r, 3*time.Second)
}

func TestUnreachableUpstream(t *testing.T) {
	tr := newTCPRecorder(t)
	port := tr.port()
	tr.l.Close() // nothing listens there now
	e := newEnv(t, allowHosts("down.test"), nil)
	e.override("down.test", localhost)
	code, body := e.get("http://down.test:" + strconv.Itoa(port) + "/")
	if code != http.StatusBadGateway || !strings.Contains(body, "could not reach down.test") || strings.Contains(body, "127.0.0.2") {
		t.Fatalf("got %d %q", code, body)
	}
	if en := e.entryFor("down.test"); !en.Allowed || en.Note != "upstream unreachable" {
		t.Errorf("entry %+v", en)
	}
	// A tunnel to it is closed.
	c := e.raw(sbAddr)
	wantStatus(t, c, bufio.NewReader(c), "CONNECT down.test:"+strconv.Itoa(port)+" HTTP/1.1\r\n\r\n", http.StatusBadGateway)
}

func TestUnknownSourceIsRefused(t *testing.T) {
	up, e := oneHost(t, "allowed.test", false)
	c := e.raw(otherAddr)
	io.WriteString(c, "GET http://allowed.test:"+strconv.Itoa(up.port())+"/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	closedWithin(t, c, 3*time.Second)
	if len(up.got()) != 0 {
		t.Fatal("a request from no sandbox went out")
	}
	e.mu.Lock()
	logs := e.logs.String()
	e.mu.Unlock()
	if !strings.Contains(logs, "no sandbox has this source address") {
		t.Fatalf("not logged: %q", logs)
	}
}

func TestConnectionCap(t *testing.T) {
	e := newEnv(t, allowHosts("allowed.test"), nil, func(c *Config) { c.MaxConns = 2 })
	a, b := e.raw(sbAddr), e.raw(sbAddr)
	_, _ = a, b
	e.waitOpen(2)
	c := e.raw(sbAddr)
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "2 connections open") {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
}

// waitOpen waits until the test sandbox has n flows open.
func (e *env) waitOpen(n int) {
	e.t.Helper()
	st := e.p.byID["sb-test"]
	for i := 0; i < 500; i++ {
		st.mu.Lock()
		got := len(st.flows)
		st.mu.Unlock()
		if got == n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.t.Fatalf("never %d open flows", n)
}

// Bodies arrive whole: a large one with a length (spliced) twice on one
// kept-alive connection, and a streamed one (chunked) as it comes.
func TestBodiesRelayed(t *testing.T) {
	big := make([]byte, 3<<20+17)
	for i := range big {
		big[i] = byte(i * 7)
	}
	release := make(chan struct{})
	srv := newRecorder(t, false)
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			io.WriteString(w, "first\n")
			w.(http.Flusher).Flush()
			<-release
			io.WriteString(w, "second\n")
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(big)))
		w.Write(big)
	})
	e := newEnv(t, allowHosts("big.test"), nil)
	e.override("big.test", localhost)
	c := e.client(nil)
	for i := 0; i < 2; i++ {
		resp, err := c.Get("http://big.test:" + strconv.Itoa(srv.port()) + "/big")
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !bytes.Equal(got, big) {
			t.Fatalf("round %d: %d bytes, %v", i, len(got), err)
		}
	}
	e.waitEntries(func(es []egress.Entry) bool {
		return len(es) == 2 && es[1].BytesIn > int64(len(big))
	})
	resp, err := c.Get("http://big.test:" + strconv.Itoa(srv.port()) + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("the first chunk did not come before the rest: %q %v", line, err)
	}
	close(release)
	if rest, _ := io.ReadAll(br); string(rest) != "second\n" {
		t.Fatalf("rest %q", rest)
	}
}

// A client that waits for 100 Continue before its body gets it.
func TestExpectContinue(t *testing.T) {
	up, e := oneHost(t, "allowed.test", false)
	c := e.raw(sbAddr)
	br := bufio.NewReader(c)
	io.WriteString(c, "POST http://allowed.test:"+strconv.Itoa(up.port())+"/up HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusContinue {
		t.Fatalf("want 100 Continue first: %v %v", resp, err)
	}
	wantStatus(t, c, br, "hello", 200)
	if got := up.got(); len(got) != 1 || got[0].Body != "hello" {
		t.Fatalf("upstream saw %+v", got)
	}
}
