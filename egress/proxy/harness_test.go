package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reinsdev/reins/egress"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The test "sandbox" is a source address on loopback.
var (
	sbAddr    = netip.MustParseAddr("127.0.0.2")
	otherAddr = netip.MustParseAddr("127.0.0.3")
	localhost = netip.MustParseAddr("127.0.0.1")
)

// recorder is an upstream server that records what reached it.
type recorder struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	Method, Host, RequestURI string
	Header                   http.Header
	Body                     string
}

func newRecorder(t *testing.T, tlsOn bool) *recorder {
	r := &recorder{}
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.reqs = append(r.reqs, recorded{req.Method, req.Host, req.RequestURI, req.Header.Clone(), string(body)})
		r.mu.Unlock()
		fmt.Fprintf(w, "hello from %s", req.Host)
	})
	if tlsOn {
		r.Server = httptest.NewTLSServer(h)
	} else {
		r.Server = httptest.NewServer(h)
	}
	t.Cleanup(r.Close)
	return r
}

func (r *recorder) got() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.reqs...)
}

func (r *recorder) port() int {
	return int(netip.MustParseAddrPort(r.Listener.Addr().String()).Port())
}

// tcpRecorder is a raw TCP listener that records every byte and
// connection reaching it, and echoes.
type tcpRecorder struct {
	l     net.Listener
	mu    sync.Mutex
	conns int
	data  bytes.Buffer
	wg    sync.WaitGroup
	open  []net.Conn
}

func newTCPRecorder(t *testing.T) *tcpRecorder {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &tcpRecorder{l: l}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			r.conns++
			r.open = append(r.open, c)
			r.mu.Unlock()
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						r.mu.Lock()
						r.data.Write(buf[:n])
						r.mu.Unlock()
						c.Write(buf[:n])
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		r.mu.Lock()
		for _, c := range r.open {
			c.Close()
		}
		r.mu.Unlock()
		r.wg.Wait()
	})
	return r
}

func (r *tcpRecorder) port() int {
	return int(netip.MustParseAddrPort(r.l.Addr().String()).Port())
}

func (r *tcpRecorder) seen() (int, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conns, r.data.String()
}

// recordingResolver answers from a table and records every name asked.
type recordingResolver struct {
	mu    sync.Mutex
	table map[string][]netip.Addr
	asked []string
}

func (r *recordingResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, host)
	if a, ok := r.table[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (r *recordingResolver) set(name string, addrs ...netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.table[name] = addrs
}

func (r *recordingResolver) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.asked...)
}

// env is a proxy serving one test sandbox on loopback.
type env struct {
	t         *testing.T
	p         *Proxy
	httpAddr  string // the explicit proxy
	transAddr string // the transparent listener
	dnsAddr   string
	res       *recordingResolver
	ca        *CA

	mu      sync.Mutex
	entries []egress.Entry
	logs    bytes.Buffer
	dsts    map[string]netip.AddrPort // client local addr -> where it "was going"
}

type envOpt func(*Config)

func newEnv(t *testing.T, rules egress.Rules, secrets []Secret, opts ...envOpt) *env {
	t.Helper()
	e := &env{t: t, res: &recordingResolver{table: map[string][]netip.Addr{}}, dsts: map[string]netip.AddrPort{}}
	ca, err := NewCA("sb-test")
	if err != nil {
		t.Fatal(err)
	}
	e.ca = ca
	cfg := Config{
		Overrides: map[string][]netip.Addr{},
		Resolver:  e.res,
		Log: func(en egress.Entry) {
			e.mu.Lock()
			e.entries = append(e.entries, en)
			e.mu.Unlock()
		},
		Logger: slog.New(slog.NewTextHandler(lockedWriter{e}, nil)),
		// The test records where a connection "was going" once its dial
		// returns, which may be after the proxy accepted it.
		OriginalDst: func(c net.Conn) (netip.AddrPort, error) {
			for i := 0; i < 200; i++ {
				e.mu.Lock()
				d, ok := e.dsts[c.RemoteAddr().String()]
				e.mu.Unlock()
				if ok {
					return d, nil
				}
				time.Sleep(5 * time.Millisecond)
			}
			return netip.AddrPort{}, fmt.Errorf("no destination recorded for %s", c.RemoteAddr())
		},
		HandshakeTimeout: 2 * time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	e.p = New(cfg)
	var wg sync.WaitGroup
	lh, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lt, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.httpAddr, e.transAddr, e.dnsAddr = lh.Addr().String(), lt.Addr().String(), pc.LocalAddr().String()
	serveErr := make(chan error, 3)
	wg.Add(3)
	go func() { defer wg.Done(); serveErr <- e.p.ServeHTTP(lh) }()
	go func() { defer wg.Done(); serveErr <- e.p.ServeTransparent(lt) }()
	go func() { defer wg.Done(); serveErr <- e.p.ServeDNS(pc) }()
	t.Cleanup(func() {
		e.p.Close()
		wg.Wait()
		close(serveErr)
		for err := range serveErr {
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		}
	})
	if rules.Mode == "" {
		rules.Mode = egress.ModeEgress
	}
	if err := e.p.Add(Sandbox{ID: "sb-test", Addr: sbAddr, Rules: rules, Secrets: secrets, CA: ca}); err != nil {
		t.Fatal(err)
	}
	return e
}

type lockedWriter struct{ e *env }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.e.mu.Lock()
	defer w.e.mu.Unlock()
	return w.e.logs.Write(b)
}

// oneHost is a recorder named host (an operator's override to loopback)
// and a sandbox allowed to reach only it.
func oneHost(t *testing.T, host string, tlsOn bool) (*recorder, *env) {
	up := newRecorder(t, tlsOn)
	e := newEnv(t, allowHosts(host), nil)
	e.override(host, localhost)
	return up, e
}

// override names name as addrs for the proxy (serve --egress-resolve);
// call before traffic.
func (e *env) override(name string, addrs ...netip.Addr) {
	e.p.mu.Lock()
	e.p.cfg.Overrides[name] = addrs
	e.p.mu.Unlock()
}

// waitEntries waits until pred holds for the log, and returns it.
func (e *env) waitEntries(pred func([]egress.Entry) bool) []egress.Entry {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		e.mu.Lock()
		got := append([]egress.Entry(nil), e.entries...)
		e.mu.Unlock()
		if pred(got) {
			return got
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("log never got there: %+v", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// entryFor waits for an entry for host and returns the first.
func (e *env) entryFor(host string) egress.Entry {
	e.t.Helper()
	var found egress.Entry
	e.waitEntries(func(es []egress.Entry) bool {
		for _, en := range es {
			if en.Host == host {
				found = en
				return true
			}
		}
		return false
	})
	return found
}

// dialer dials from the sandbox's address.
func dialerFrom(a netip.Addr) *net.Dialer {
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: a.AsSlice()}, Timeout: 5 * time.Second}
}

// client is an HTTP client in the sandbox using the explicit proxy,
// trusting roots (nil: the sandbox's CA).
func (e *env) client(roots *x509.CertPool) *http.Client {
	if roots == nil {
		roots = x509.NewCertPool()
		roots.AppendCertsFromPEM(e.ca.CertPEM())
	}
	u, _ := url.Parse("http://" + e.httpAddr)
	tr := &http.Transport{
		Proxy:             http.ProxyURL(u),
		DialContext:       dialerFrom(sbAddr).DialContext,
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		DisableKeepAlives: false,
	}
	e.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// raw opens a connection from src to the explicit proxy.
func (e *env) raw(src netip.Addr) net.Conn {
	e.t.Helper()
	c, err := dialerFrom(src).Dial("tcp", e.httpAddr)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

// redirected opens a connection from the sandbox to the transparent
// listener as if the firewall had redirected a connection to dst.
func (e *env) redirected(dst netip.AddrPort) net.Conn {
	e.t.Helper()
	c, err := dialerFrom(sbAddr).Dial("tcp", e.transAddr)
	if err != nil {
		e.t.Fatal(err)
	}
	e.mu.Lock()
	e.dsts[c.LocalAddr().String()] = dst
	e.mu.Unlock()
	e.t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes a raw request on c and reads the response.
func roundTrip(t *testing.T, c net.Conn, br *bufio.Reader, raw string) (*http.Response, string) {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var req *http.Request
	if strings.HasPrefix(raw, "CONNECT ") {
		req = &http.Request{Method: http.MethodConnect}
	}
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatalf("response to %q: %v", firstLine(raw), err)
	}
	if req != nil && resp.StatusCode == 200 {
		c.SetReadDeadline(time.Time{})
		return resp, "" // the tunnel follows
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// wantStatus is roundTrip that fails the test unless the status is want.
func wantStatus(t *testing.T, c net.Conn, br *bufio.Reader, raw string, want int) string {
	t.Helper()
	resp, body := roundTrip(t, c, br, raw)
	if resp.StatusCode != want {
		t.Fatalf("%q: status %d, want %d: %q", firstLine(raw), resp.StatusCode, want, body)
	}
	return body
}

// get is a GET by the sandbox's client through the explicit proxy.
func (e *env) get(u string) (int, string) {
	e.t.Helper()
	resp, err := e.client(nil).Get(u)
	if err != nil {
		e.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(body)
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\r\n")
	return l
}

func allowHosts(hosts ...string) egress.Rules {
	r := egress.Rules{Mode: egress.ModeEgress}
	for _, h := range hosts {
		hr, err := egress.ParseHostRule(h)
		if err != nil {
			panic(err)
		}
		r.AllowHosts = append(r.AllowHosts, hr)
	}
	n, err := r.Normalize(true)
	if err != nil {
		panic(err)
	}
	return n
}

// closedWithin asserts that the peer closes c within d.
func closedWithin(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	if isTimeout(err) {
		t.Fatalf("connection not closed within %v", d)
	}
}
