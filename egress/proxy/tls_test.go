package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/reinsdev/reins/egress"
)

const secretValue = "ghp_THEREALVALUE0123456789"

func testSecret(hosts ...string) Secret {
	return Secret{Name: "GITHUB_TOKEN", Placeholder: NewPlaceholder(), Value: []byte(secretValue), Hosts: hosts}
}

// upstreamRoots trusts the httptest server's certificate (for
// example.com, 127.0.0.1).
func upstreamRoots(up *recorder) *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(up.Certificate())
	return pool
}

// HTTPS to a host a secret is bound to is terminated with the sandbox's
// CA; the placeholder is replaced in headers, Basic credentials, path and
// query, never in the body.
func TestSecretInjectedIntoTerminatedHTTPS(t *testing.T) {
	up := newRecorder(t, true)
	sec := testSecret("example.com")
	e := newEnv(t, allowHosts("example.com"), []Secret{sec}, func(c *Config) { c.UpstreamRoots = upstreamRoots(up) })
	e.override("example.com", localhost)
	ph := sec.Placeholder
	u := "https://example.com:" + strconv.Itoa(up.port()) + "/repos/" + ph + "/x?token=" + ph + "&a=1"
	req, _ := http.NewRequest("POST", u, strings.NewReader("body "+ph))
	req.Header.Set("Authorization", "Bearer "+ph)
	req.Header.Set("X-Other", "k="+ph)
	// The sandbox trusts only its CA: the handshake succeeding proves the
	// proxy terminated with a leaf of it.
	resp, err := e.client(nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName != "reins sandbox sb-test egress CA" {
		t.Fatalf("not the sandbox CA's leaf: %+v", resp.TLS)
	}
	// git's way: https://user:TOKEN@host becomes Basic credentials.
	req, _ = http.NewRequest("GET", "https://x-access-token:"+ph+"@example.com:"+strconv.Itoa(up.port())+"/info/refs", nil)
	resp, err = e.client(nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	got := up.got()
	if len(got) != 2 {
		t.Fatalf("upstream saw %d requests", len(got))
	}
	r := got[0]
	if r.Header.Get("Authorization") != "Bearer "+secretValue || r.Header.Get("X-Other") != "k="+secretValue {
		t.Errorf("headers not injected: %v", r.Header)
	}
	if r.RequestURI != "/repos/"+secretValue+"/x?token="+secretValue+"&a=1" {
		t.Errorf("URL not injected: %s", r.RequestURI)
	}
	if r.Body != "body "+ph {
		t.Errorf("body changed: %q", r.Body)
	}
	wantBasic := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+secretValue))
	if a := got[1].Header.Get("Authorization"); a != wantBasic {
		t.Errorf("Basic credentials not injected: %q", a)
	}
	es := e.waitEntries(func(es []egress.Entry) bool { return len(es) >= 2 })
	for _, en := range es[:2] {
		if en.Proto != "https" || !en.Allowed || en.Note != "secret GITHUB_TOKEN injected" {
			t.Errorf("entry %+v", en)
		}
	}
	e.noSecretValue()
}

// A placeholder sent to a host it is not bound to is not replaced, and
// the attempt is logged.
func TestPlaceholderToUnboundHostIsNotReplaced(t *testing.T) {
	up := newRecorder(t, false)
	sec := testSecret("example.com")
	e := newEnv(t, allowHosts("example.com", "other.test"), []Secret{sec})
	e.override("other.test", localhost)
	req, _ := http.NewRequest("GET", "http://other.test:"+strconv.Itoa(up.port())+"/p?q="+sec.Placeholder, nil)
	req.SetBasicAuth("u", sec.Placeholder)
	resp, err := e.client(nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	got := up.got()
	if len(got) != 1 || !strings.Contains(got[0].RequestURI, sec.Placeholder) {
		t.Fatalf("upstream saw %+v", got)
	}
	if u, p, _ := (&http.Request{Header: got[0].Header}).BasicAuth(); u != "u" || p != sec.Placeholder {
		t.Fatalf("Basic credentials changed: %q %q", u, p)
	}
	en := e.entryFor("other.test")
	if !strings.Contains(en.Note, "placeholder of secret GITHUB_TOKEN sent to a host it is not bound to (not replaced)") {
		t.Errorf("entry %+v", en)
	}
	e.noSecretValue()
}

// HTTPS to a host with no bound secret is tunneled blind: the client
// sees the real server's certificate.
func TestHTTPSWithoutSecretIsTunneledBlind(t *testing.T) {
	up := newRecorder(t, true)
	e := newEnv(t, allowHosts("example.com"), []Secret{testSecret("api.example.org")})
	e.override("example.com", localhost)
	resp, err := e.client(upstreamRoots(up)).Get("https://example.com:" + strconv.Itoa(up.port()) + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || len(up.got()) != 1 {
		t.Fatalf("status %d, upstream saw %d", resp.StatusCode, len(up.got()))
	}
	if en := e.entryFor("example.com"); en.Proto != "tls" || !en.Allowed || en.BytesIn == 0 {
		t.Errorf("entry %+v", en)
	}
}

// The SNI inside a CONNECT tunnel must be the CONNECT host.
func TestConnectSNIMismatchRefused(t *testing.T) {
	up, e := oneHost(t, "example.com", true)
	c := e.raw(sbAddr)
	br := bufio.NewReader(c)
	wantStatus(t, c, br, "CONNECT example.com:"+strconv.Itoa(up.port())+" HTTP/1.1\r\nHost: example.com\r\n\r\n", 200)
	tc := tls.Client(c, &tls.Config{ServerName: "evil.test", InsecureSkipVerify: true})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Fatalf("a TLS handshake for another name went through the tunnel: %+v", tc.ConnectionState().PeerCertificates[0].Subject)
	}
	if en := e.entryFor("evil.test"); en.Allowed || !strings.Contains(en.Rule, "is not the CONNECT host example.com") {
		t.Errorf("entry %+v", en)
	}
	if len(up.got()) != 0 {
		t.Fatal("upstream reached")
	}
}

// A CONNECT to the proxy itself (or any Forbidden address) is refused,
// even when a name the operator trusts points there.
func TestConnectToTheServiceItselfRefused(t *testing.T) {
	api := newTCPRecorder(t)
	apiAddr := netip.MustParseAddrPort(api.l.Addr().String())
	e := newEnv(t, allowHosts("self.test", "api.test"), nil, func(c *Config) { c.Forbidden = []netip.AddrPort{apiAddr} })
	e.override("self.test", localhost)
	e.override("api.test", localhost)
	proxyPort := netip.MustParseAddrPort(e.httpAddr).Port()
	for _, target := range []string{"self.test:" + strconv.Itoa(int(proxyPort)), "api.test:" + strconv.Itoa(int(apiAddr.Port()))} {
		c := e.raw(sbAddr)
		resp, body := roundTrip(t, c, bufio.NewReader(c), "CONNECT "+target+" HTTP/1.1\r\n\r\n")
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "the service's own listener") {
			t.Errorf("CONNECT %s: %d %q", target, resp.StatusCode, body)
		}
	}
	if n, _ := api.seen(); n != 0 {
		t.Fatalf("the service's listener got %d connections", n)
	}
}

// WebSocket upgrades pass through, both ways.
func TestWebSocketPassesThrough(t *testing.T) {
	srv := newEchoWS(t)
	e := newEnv(t, allowHosts("ws.test"), nil)
	e.override("ws.test", localhost)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws://ws.test:"+strconv.Itoa(srv)+"/", &websocket.DialOptions{HTTPClient: e.client(nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	if err := conn.Write(ctx, websocket.MessageText, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	_, msg, err := conn.Read(ctx)
	if err != nil || string(msg) != "echo ping" {
		t.Fatalf("read %q %v", msg, err)
	}
	conn.Close(websocket.StatusNormalClosure, "")
}

func newEchoWS(t *testing.T) int {
	srv := newRecorder(t, false)
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, b, err := c.Read(r.Context())
			if err != nil {
				return
			}
			c.Write(r.Context(), typ, append([]byte("echo "), b...))
		}
	})
	return srv.port()
}

// Redirected connections: TLS by SNI (terminated when a secret is bound),
// HTTP by Host, a bare address refused.
func TestTransparent(t *testing.T) {
	up := newRecorder(t, true)
	plain := newRecorder(t, false)
	sec := testSecret("example.com")
	e := newEnv(t, allowHosts("example.com", "plain.test"), []Secret{sec}, func(c *Config) { c.UpstreamRoots = upstreamRoots(up) })
	e.override("example.com", localhost)
	e.override("plain.test", localhost)
	// The sandbox's idea of the address is ignored: the proxy connects to
	// what the name resolves to.
	dst := netip.AddrPortFrom(netip.MustParseAddr("198.51.100.1"), uint16(up.port()))
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(e.ca.CertPEM())
	tr := &http.Transport{
		DialContext:     func(context.Context, string, string) (net.Conn, error) { return e.redirected(dst), nil },
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("GET", "https://example.com/x", nil)
	req.Header.Set("Authorization", "token "+sec.Placeholder)
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		time.Sleep(100 * time.Millisecond)
		t.Fatalf("%v; log %+v", err, e.entries)
	}
	resp.Body.Close()
	if got := up.got(); len(got) != 1 || got[0].Header.Get("Authorization") != "token "+secretValue {
		t.Fatalf("upstream saw %+v", got)
	}

	c := e.redirected(netip.AddrPortFrom(netip.MustParseAddr("198.51.100.2"), uint16(plain.port())))
	resp, _ = roundTrip(t, c, bufio.NewReader(c), "GET /y HTTP/1.1\r\nHost: PLAIN.test.\r\n\r\n")
	if resp.StatusCode != 200 || len(plain.got()) != 1 {
		t.Fatalf("plain: %d, saw %d", resp.StatusCode, len(plain.got()))
	}

	// A bare address with no name: refused, nothing sent.
	raw := newTCPRecorder(t)
	c = e.redirected(netip.AddrPortFrom(localhost, uint16(raw.port())))
	io.WriteString(c, "hello")
	closedWithin(t, c, 3*time.Second)
	if n, _ := raw.seen(); n != 0 {
		t.Fatal("a bare address was reached")
	}
	e.noSecretValue()
}

// Raw TCP to an address the sandbox looked up is decided by that name;
// a synthetic address the DNS never gave is refused.
func TestDNSNameAttributesRawTCP(t *testing.T) {
	raw := newTCPRecorder(t)
	e := newEnv(t, allowHosts("db.test"), nil)
	e.override("db.test", localhost)
	ans := e.query(t, "db.test.", dnsA)
	if ans.rcode != 0 || len(ans.addrs) != 1 || !FakeRange.Contains(ans.addrs[0]) {
		t.Fatalf("answer %+v", ans)
	}
	// The sandbox connects to the synthetic address; the proxy to
	// where db.test is (loopback, by the operator's name).
	c := e.redirected(netip.AddrPortFrom(ans.addrs[0], uint16(raw.port())))
	io.WriteString(c, "\x00\x01binary")
	buf := make([]byte, 8)
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || !bytes.Equal(buf, []byte("\x00\x01binary")) {
		t.Fatalf("echo %q %v", buf, err)
	}
	c.Close()
	en := e.waitEntries(func(es []egress.Entry) bool {
		for _, en := range es {
			if en.Proto == "tcp" {
				return true
			}
		}
		return false
	})
	for _, x := range en {
		if x.Proto == "tcp" && (x.Host != "db.test" || !x.Allowed || x.BytesOut != 8) {
			t.Errorf("entry %+v", x)
		}
	}
	never := e.redirected(netip.AddrPortFrom(netip.MustParseAddr("198.19.200.7"), uint16(raw.port())))
	io.WriteString(never, "\x00\x01binary")
	closedWithin(t, never, 3*time.Second)
	if n, _ := raw.seen(); n != 1 {
		t.Errorf("a synthetic address the DNS never gave was reached (%d connections)", n)
	}
}

// Update closes an open connection the new rules deny, and keeps one
// they still allow; Remove closes the rest.
func TestUpdateClosesDeniedConnections(t *testing.T) {
	raw := newTCPRecorder(t)
	e := newEnv(t, allowHosts("keep.test", "drop.test"), nil)
	e.override("keep.test", localhost)
	e.override("drop.test", localhost)
	open := func(host string) (net.Conn, *bufio.Reader) {
		c := e.raw(sbAddr)
		br := bufio.NewReader(c)
		resp, _ := roundTrip(t, c, br, "CONNECT "+host+":"+strconv.Itoa(raw.port())+" HTTP/1.1\r\n\r\n")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT %s: %d", host, resp.StatusCode)
		}
		io.WriteString(c, "hi")
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		b := make([]byte, 2)
		if _, err := io.ReadFull(br, b); err != nil {
			t.Fatal(err)
		}
		return c, br
	}
	keep, keepR := open("keep.test")
	drop, _ := open("drop.test")
	if err := e.p.Update("sb-test", allowHosts("keep.test"), nil); err != nil {
		t.Fatal(err)
	}
	closedWithin(t, drop, 3*time.Second)
	io.WriteString(keep, "ok")
	keep.SetReadDeadline(time.Now().Add(3 * time.Second))
	b := make([]byte, 2)
	if _, err := io.ReadFull(keepR, b); err != nil || string(b) != "ok" {
		t.Fatalf("the allowed tunnel broke: %q %v", b, err)
	}
	if en := e.entryFor("drop.test"); en.Note != "closed: the rules changed" {
		t.Errorf("entry %+v", en)
	}
	e.p.Remove("sb-test")
	closedWithin(t, keep, 3*time.Second)
	if err := e.p.Update("sb-test", allowHosts("keep.test"), nil); err == nil {
		t.Fatal("Update of a removed sandbox")
	}
}

// noSecretValue asserts that no entry and no log line has the value.
func (e *env) noSecretValue() {
	e.t.Helper()
	time.Sleep(50 * time.Millisecond)
	e.mu.Lock()
	defer e.mu.Unlock()
	if strings.Contains(e.logs.String(), secretValue) {
		e.t.Errorf("a log line has the secret's value")
	}
	for _, en := range e.entries {
		if strings.Contains(strings.Join([]string{en.Host, en.Rule, en.Note, en.Addr}, " "), secretValue) {
			e.t.Errorf("an entry has the secret's value: %+v", en)
		}
	}
}

// On a terminated connection every request must be for the TLS name; in
// a CONNECT tunnel carrying plain HTTP each request's Host is decided.
func TestHostAndSNIMismatch(t *testing.T) {
	up := newRecorder(t, true)
	plain := newRecorder(t, false)
	sec := testSecret("example.com")
	e := newEnv(t, allowHosts("example.com", "plain.test"), []Secret{sec}, func(c *Config) { c.UpstreamRoots = upstreamRoots(up) })
	e.override("example.com", localhost)
	e.override("plain.test", localhost)
	e.override("evil.test", localhost)
	c := e.raw(sbAddr)
	wantStatus(t, c, bufio.NewReader(c), "CONNECT example.com:"+strconv.Itoa(up.port())+" HTTP/1.1\r\n\r\n", 200)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(e.ca.CertPEM())
	tc := tls.Client(c, &tls.Config{ServerName: "example.com", RootCAs: roots})
	tbr := bufio.NewReader(tc)
	wantStatus(t, tc, tbr, "GET /ok HTTP/1.1\r\nHost: example.com\r\n\r\n", 200)
	resp, body := roundTrip(t, tc, tbr, "GET /x HTTP/1.1\r\nHost: evil.test\r\nAuthorization: Bearer "+sec.Placeholder+"\r\n\r\n")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "is not the TLS server name") {
		t.Fatalf("another Host: %d %q", resp.StatusCode, body)
	}
	if got := up.got(); len(got) != 1 {
		t.Fatalf("upstream saw %+v", got)
	}

	// Plain HTTP inside a CONNECT tunnel: the CONNECT host's connection
	// serves it; another Host is decided on its own.
	c = e.raw(sbAddr)
	br := bufio.NewReader(c)
	wantStatus(t, c, br, "CONNECT plain.test:"+strconv.Itoa(plain.port())+" HTTP/1.1\r\n\r\n", 200)
	wantStatus(t, c, br, "GET /in HTTP/1.1\r\nHost: plain.test\r\n\r\n", 200)
	wantStatus(t, c, br, "GET /in HTTP/1.1\r\nHost: evil.test\r\n\r\n", http.StatusForbidden)
	if got := plain.got(); len(got) != 1 {
		t.Fatalf("plain saw %+v", got)
	}
}

// An idle kept-alive connection to a host the new rules deny is closed
// and logged.
func TestUpdateClosesIdleKeptAlive(t *testing.T) {
	up, e := oneHost(t, "a.test", false)
	c := e.raw(sbAddr)
	resp, _ := roundTrip(t, c, bufio.NewReader(c), "GET http://a.test:"+strconv.Itoa(up.port())+"/ HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 200 || up.got()[0].Host != "a.test:"+strconv.Itoa(up.port()) {
		t.Fatalf("%d %+v", resp.StatusCode, up.got())
	}
	if err := e.p.Update("sb-test", allowHosts("b.test"), nil); err != nil {
		t.Fatal(err)
	}
	closedWithin(t, c, 3*time.Second)
	e.waitEntries(func(es []egress.Entry) bool {
		return len(es) == 2 && es[1].Note == "closed: the rules changed" && es[1].Host == "a.test"
	})
}
