package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// These are the hosts "outside" a sandbox in the network tests: servers on
// the host's loopback that record everything that reaches them, so a test
// asserts what arrived (or that nothing did), not only an exit code. The
// service reaches them by names the test gives it (serve --egress-resolve
// NAME=127.0.0.1), since tests talk to loopback only.

// hit is one request that reached a recorder.
type hit struct {
	Host, Path string
	Header     http.Header
}

// recorder is an HTTP (or HTTPS) server that records every request.
type recorder struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []hit
	// slowGone is closed when a /slow request's client went away.
	slowGone chan struct{}
	slowOnce *sync.Once
}

func newRecorder(t *testing.T, tlsCert *tls.Certificate) *recorder {
	r := &recorder{slowGone: make(chan struct{}), slowOnce: &sync.Once{}}
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.got = append(r.got, hit{Host: req.Host, Path: req.URL.RequestURI(), Header: req.Header.Clone()})
		r.mu.Unlock()
		switch {
		case req.URL.Path == "/slow":
			// A long download: a byte every 100 ms for a minute.
			w.Header().Set("Content-Length", "600")
			for i := 0; i < 600; i++ {
				if _, err := w.Write([]byte("x")); err != nil {
					break
				}
				w.(http.Flusher).Flush()
				select {
				case <-req.Context().Done():
					r.slowEnded()
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
			r.slowEnded()
		case strings.HasPrefix(req.URL.Path, "/big/"):
			// /big/N: N MiB of zeros.
			n := 0
			for _, c := range strings.TrimPrefix(req.URL.Path, "/big/") {
				n = n*10 + int(c-'0')
			}
			w.Header().Set("Content-Length", strconv.Itoa(n<<20))
			buf := make([]byte, 1<<20)
			for i := 0; i < n; i++ {
				w.Write(buf)
			}
		default:
			io.WriteString(w, "reached "+req.URL.Path+"\n")
		}
	})
	r.srv = httptest.NewUnstartedServer(h)
	if tlsCert != nil {
		r.srv.TLS = &tls.Config{Certificates: []tls.Certificate{*tlsCert}}
		r.srv.StartTLS()
	} else {
		r.srv.Start()
	}
	t.Cleanup(r.srv.Close)
	return r
}

func (r *recorder) slowEnded() {
	r.mu.Lock()
	once, ch := r.slowOnce, r.slowGone
	r.mu.Unlock()
	once.Do(func() { close(ch) })
}

// slowDone is closed when the current /slow request's client went away;
// resetSlow starts a new wait.
func (r *recorder) slowDone() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.slowGone
}

func (r *recorder) resetSlow() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.slowGone, r.slowOnce = make(chan struct{}), &sync.Once{}
}

// port is the recorder's port on 127.0.0.1.
func (r *recorder) port() string {
	_, p, _ := net.SplitHostPort(r.srv.Listener.Addr().String())
	return p
}

// hits returns the requests whose path starts with prefix.
func (r *recorder) hits(prefix string) []hit {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []hit
	for _, h := range r.got {
		if strings.HasPrefix(h.Path, prefix) {
			out = append(out, h)
		}
	}
	return out
}

// all returns every request as text, to search for leaks.
func (r *recorder) all() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, h := range r.got {
		b.WriteString(h.Host + " " + h.Path + "\n")
		for k, v := range h.Header {
			b.WriteString(k + ": " + strings.Join(v, ",") + "\n")
		}
	}
	return b.String()
}

// dnsRecorder is the upstream DNS server the proxy asks (serve
// --egress-dns): it answers every A query with a public address
// (example.com's), and names that start with "rebind" with 127.0.0.1 (a
// DNS rebinding attack), and records the names asked, so a test sees
// whether a query left the host.
type dnsRecorder struct {
	pc    net.PacketConn
	mu    sync.Mutex
	names []string
}

func newDNSRecorder(t *testing.T) *dnsRecorder {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &dnsRecorder{pc: pc}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var m dnsmessage.Message
			if m.Unpack(buf[:n]) != nil || len(m.Questions) == 0 {
				continue
			}
			q := m.Questions[0]
			d.mu.Lock()
			d.names = append(d.names, strings.ToLower(q.Name.String()))
			d.mu.Unlock()
			m.Header.Response, m.Header.RecursionAvailable = true, true
			if q.Type == dnsmessage.TypeA {
				a := [4]byte{93, 184, 215, 14}
				if strings.HasPrefix(strings.ToLower(q.Name.String()), "rebind") {
					a = [4]byte{127, 0, 0, 1}
				}
				m.Answers = []dnsmessage.Resource{{
					Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 5},
					Body:   &dnsmessage.AResource{A: a},
				}}
			}
			if out, err := m.Pack(); err == nil {
				pc.WriteTo(out, from)
			}
		}
	}()
	return d
}

func (d *dnsRecorder) addr() string { return d.pc.LocalAddr().String() }

// asked reports whether any query named something containing s.
func (d *dnsRecorder) asked(s string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, n := range d.names {
		if strings.Contains(n, strings.ToLower(s)) {
			return true
		}
	}
	return false
}

// testCA is a CA the test makes for the "outside" HTTPS servers; the
// service trusts it (SSL_CERT_FILE), sandboxes do not.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string
}

func newTestCA(t *testing.T) *testCA {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "reins e2e outside CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	file := filepath.Join(t.TempDir(), "outside-ca.pem")
	os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	return &testCA{cert: cert, key: key, file: file}
}

// leaf is a server certificate for names, signed by the CA.
func (c *testCA) leaf(t *testing.T, names ...string) *tls.Certificate {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		DNSNames: names, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
