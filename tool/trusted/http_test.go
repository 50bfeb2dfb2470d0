package trusted

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/tool"
)

// echoServer answers /echo with the request it got, and a few other paths
// with canned answers.
type echoServer struct {
	*httptest.Server
	mu   sync.Mutex
	seen []*http.Request
}

func newEchoServer(t *testing.T, tls bool) *echoServer {
	t.Helper()
	s := &echoServer{}
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.seen = append(s.seen, r)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"method": r.Method, "headers": r.Header, "body": string(body)})
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte(strings.Repeat("a", 99) + "é" + strings.Repeat("b", 900))) // 1001 bytes, é at 99–100
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		for range 10 {
			w.Write([]byte(strings.Repeat("c", 100)))
			w.(http.Flusher).Flush() // no Content-Length
		}
	})
	mux.HandleFunc("/png", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Write([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"))
	})
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such thing", http.StatusNotFound)
	})
	mux.HandleFunc("/empty", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // the server notices a closed connection only after the body
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/loop", http.StatusFound)
	})
	if tls {
		s.Server = httptest.NewTLSServer(mux)
	} else {
		s.Server = httptest.NewServer(mux)
	}
	t.Cleanup(s.Close)
	return s
}

func (s *echoServer) host() string {
	return strings.TrimPrefix(strings.TrimPrefix(s.URL, "http://"), "https://")
}

func (s *echoServer) last() *http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.seen) == 0 {
		return nil
	}
	return s.seen[len(s.seen)-1]
}

func newHTTPTool(t *testing.T, cfg HTTPConfig) *HTTP {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	h, err := NewHTTP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

func httpInputJSON(method, url string, extra ...any) string {
	m := map[string]any{"method": method, "url": url}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i].(string)] = extra[i+1]
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func TestHTTPSpec(t *testing.T) {
	h := newHTTPTool(t, HTTPConfig{
		AllowedHosts: []string{"api.example.com", "*.example.org", "127.0.0.1:8080"},
		Secrets:      map[string]map[string]string{"api.example.com": {"Authorization": "Bearer sekrit-value"}},
	})
	spec := h.Spec()
	if spec.Name != "http_request" || spec.Side != tool.SideTrusted ||
		!spec.HasLabel(tool.LabelReadsUntrusted) || !spec.HasLabel(tool.LabelExfiltrationSink) {
		t.Errorf("spec = %+v", spec)
	}
	for _, want := range []string{"api.example.com, *.example.org, 127.0.0.1:8080", "Credentials for api.example.com", "256 KiB", "after 5s"} {
		if !strings.Contains(spec.Description, want) {
			t.Errorf("description lacks %q: %s", want, spec.Description)
		}
	}
	if strings.Contains(spec.Description, "sekrit") {
		t.Errorf("description shows a secret: %s", spec.Description)
	}
	checkSchema(t, spec.InputSchema, "method", "url")
}

func TestHTTPRequests(t *testing.T) {
	srv := newEchoServer(t, false)
	h := newHTTPTool(t, HTTPConfig{AllowedHosts: []string{srv.host()}, MaxResponseBytes: 100})

	res := mustCall(t, h, httpInputJSON("GET", srv.URL+"/echo?q=1", "headers", map[string]string{"Accept": "application/json", "x-trace": "abc"}))
	if res.IsError || !strings.HasPrefix(res.Text, "HTTP/1.1 200 OK\nContent-Type: application/json\nContent-Length: ") {
		t.Errorf("GET: %+v", res)
	}
	r := srv.last()
	if r.Method != "GET" || r.Header.Get("X-Trace") != "abc" || r.Header.Get("User-Agent") != "reins-http-request/1" || r.Header.Get("Idempotency-Key") != "" {
		t.Errorf("server saw %s %v", r.Method, r.Header)
	}

	h2 := newHTTPTool(t, HTTPConfig{AllowedHosts: []string{srv.host()}})
	keys := map[string]bool{}
	for _, key := range []string{"run/1/0", "run/1/0", "run/2/0"} {
		if _, err := h2.Call(context.Background(), key, json.RawMessage(httpInputJSON("POST", srv.URL+"/echo", "body", `{"a":1}`))); err != nil {
			t.Fatal(err)
		}
		r = srv.last()
		keys[r.Header.Get("Idempotency-Key")] = true
		if r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("POST JSON: Content-Type %q", r.Header.Get("Content-Type"))
		}
	}
	if len(keys) != 2 || keys[""] {
		t.Errorf("Idempotency-Keys: %v", keys)
	}
	mustCall(t, h2, httpInputJSON("PUT", srv.URL+"/echo", "body", "plain words"))
	if ct := srv.last().Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
		t.Errorf("PUT text: Content-Type %q", ct)
	}

	tests := []struct {
		name, input, want string
		isError           bool
	}{
		{"cut with length", httpInputJSON("GET", srv.URL+"/big"),
			"Content-Length: 1001\n\n" + strings.Repeat("a", 99) + "\n…[response cut: 902 more bytes dropped; showing the first 99 of 1001 bytes]", false},
		{"cut while streaming", httpInputJSON("GET", srv.URL+"/stream"),
			"Content-Type: text/plain\n\n" + strings.Repeat("c", 100) + "\n…[response cut: 900 more bytes dropped; showing the first 100 of 1000 bytes]", false},
		{"binary", httpInputJSON("GET", srv.URL+"/png"), "[binary body not shown: 16 bytes of image/png", false},
		{"not found", httpInputJSON("GET", srv.URL+"/missing"), "HTTP/1.1 404 Not Found\nContent-Type: text/plain; charset=utf-8", true},
		{"no content", httpInputJSON("DELETE", srv.URL+"/empty"), "HTTP/1.1 204 No Content\n\n(empty body)", false},
		{"head", httpInputJSON("HEAD", srv.URL+"/big"), "HTTP/1.1 200 OK\nContent-Type: text/plain; charset=utf-8\nContent-Length: 1001\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := mustCall(t, h, tt.input)
			if res.IsError != tt.isError || !strings.Contains(res.Text, tt.want) {
				t.Errorf("got (IsError=%v)\n%s\nwant it to contain\n%s", res.IsError, res.Text, tt.want)
			}
		})
	}
}

func TestHTTPAllowedHosts(t *testing.T) {
	srv := newEchoServer(t, false)
	other := newEchoServer(t, false)
	h := newHTTPTool(t, HTTPConfig{AllowedHosts: []string{srv.host(), "api.example.com"}})
	allowed := srv.host() + ", api.example.com"

	for _, u := range []string{
		other.URL + "/echo",
		"http://example.org/",
		"http://api.example.com:8080/",
		"http://sub.api.example.com/",
		"http://127.0.0.1/",
	} {
		_, err := call(t, h, httpInputJSON("GET", u))
		if !errors.Is(err, errdefs.ErrPermissionDenied) || !strings.Contains(err.Error(), "is not allowed by configuration; allowed: "+allowed) {
			t.Errorf("%s: err = %v", u, err)
		}
	}
	if other.last() != nil {
		t.Error("a request reached a host that is not allowed")
	}

	t.Run("redirects", func(t *testing.T) {
		res := mustCall(t, h, httpInputJSON("GET", srv.URL+"/redirect?to=/echo"))
		if !strings.Contains(res.Text, "HTTP/1.1 200 OK\nFinal URL: "+srv.URL+"/echo\n") {
			t.Errorf("allowed redirect: %s", res.Text)
		}
		res = mustCall(t, h, httpInputJSON("GET", srv.URL+"/redirect?to="+url.QueryEscape(other.URL+"/echo")))
		for _, want := range []string{
			"HTTP/1.1 302 Found\n",
			"\nLocation: " + other.URL + "/echo\n" +
				"Redirect to " + other.URL + "/echo not followed: the host is not allowed by configuration; allowed: " + allowed + ".\n",
		} {
			if !strings.Contains(res.Text, want) {
				t.Errorf("refused redirect:\n%s\nwant it to contain\n%s", res.Text, want)
			}
		}
		if other.last() != nil {
			t.Error("a redirect reached a host that is not allowed")
		}
		res = mustCall(t, h, httpInputJSON("GET", srv.URL+"/redirect?to="+url.QueryEscape("file:///etc/passwd")))
		if !strings.Contains(res.Text, "not followed: only http and https are allowed") {
			t.Errorf("file redirect: %s", res.Text)
		}
		res = mustCall(t, h, httpInputJSON("GET", srv.URL+"/loop"))
		if !strings.Contains(res.Text, "not followed: more than 5 redirects") {
			t.Errorf("loop: %s", res.Text)
		}
	})
}

func TestHTTPNameResolution(t *testing.T) {
	srv := newEchoServer(t, false)
	_, port, _ := strings.Cut(srv.host(), ":")
	tests := []struct {
		name string
		ips  []string
		ok   bool
	}{
		{"loopback", []string{"127.0.0.1"}, false},
		{"metadata", []string{"169.254.169.254"}, false},
		{"mapped loopback", []string{"::ffff:127.0.0.1"}, false},
		{"unspecified", []string{"0.0.0.0"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHTTPTool(t, HTTPConfig{AllowedHosts: []string{"internal.test:" + port}})
			h.lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
				var out []netip.Addr
				for _, s := range tt.ips {
					out = append(out, netip.MustParseAddr(s))
				}
				return out, nil
			}
			_, err := call(t, h, httpInputJSON("GET", "http://internal.test:"+port+"/echo"))
			if !errors.Is(err, errdefs.ErrPermissionDenied) || !strings.Contains(err.Error(), "host internal.test resolves to "+netip.MustParseAddr(tt.ips[0]).Unmap().String()) {
				t.Errorf("err = %v", err)
			}
		})
	}
	// "localhost" names loopback on purpose.
	h := newHTTPTool(t, HTTPConfig{AllowedHosts: []string{"localhost:" + port}})
	res := mustCall(t, h, httpInputJSON("GET", "http://localhost:"+port+"/echo"))
	if res.IsError || !strings.HasPrefix(res.Text, "HTTP/1.1 200 OK") {
		t.Errorf("localhost: %+v", res)
	}
}

func TestHTTPSecrets(t *testing.T) {
	srv := newEchoServer(t, true)
	plain := newEchoServer(t, false)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	const token, apiKey = "tok-0123456789", "key-abcdefgh"
	h := newHTTPTool(t, HTTPConfig{
		AllowedHosts: []string{srv.host(), plain.host(), "api.test"},
		Secrets: map[string]map[string]string{
			srv.host(): {"authorization": "Bearer " + token, "X-Api-Key": apiKey},
			"api.test": {"X-Api-Key": apiKey},
		},
		TLS: &tls.Config{RootCAs: pool},
	})

	res := mustCall(t, h, httpInputJSON("GET", srv.URL+"/echo", "headers", map[string]string{"Authorization": "Bearer mine"}))
	r := srv.last()
	if r.Header.Get("Authorization") != "Bearer "+token || r.Header.Get("X-Api-Key") != apiKey {
		t.Errorf("server saw %v", r.Header)
	}
	if strings.Contains(res.Text, token) || strings.Contains(res.Text, apiKey) || !strings.Contains(res.Text, `"Authorization":["[secret]"]`) {
		t.Errorf("the echoed secrets are not redacted:\n%s", res.Text)
	}

	// A redirect to another allowed host does not carry the secrets.
	mustCall(t, h, httpInputJSON("GET", srv.URL+"/redirect?to="+url.QueryEscape(plain.URL+"/echo")))
	r = plain.last()
	if r == nil || r.Header.Get("X-Api-Key") != "" || r.Header.Get("Authorization") != "" {
		t.Errorf("redirect target saw %v", r)
	}

	// Secrets go only over https (or to loopback).
	_, err := call(t, h, httpInputJSON("GET", "http://api.test/"))
	if !errors.Is(err, errdefs.ErrPermissionDenied) || !strings.Contains(err.Error(), "sent only over https") {
		t.Errorf("plain http with secrets: err = %v", err)
	}
}

func TestHTTPFailures(t *testing.T) {
	srv := newEchoServer(t, false)
	h := newHTTPTool(t, HTTPConfig{AllowedHosts: []string{srv.host(), "127.0.0.1:1"}, Timeout: 300 * time.Millisecond})
	_, err := call(t, h, httpInputJSON("POST", srv.URL+"/slow", "body", "x"))
	if !errors.Is(err, errdefs.ErrTimeout) || !strings.Contains(err.Error(), "no complete answer within 300ms; the request may or may not have taken effect") {
		t.Errorf("slow: err = %v", err)
	}
	_, err = call(t, h, httpInputJSON("GET", "http://127.0.0.1:1/"))
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("refused: err = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = h.Call(ctx, "k", json.RawMessage(httpInputJSON("GET", srv.URL+"/echo")))
	if !errors.Is(err, errdefs.ErrCanceled) {
		t.Errorf("cancelled: err = %v", err)
	}
}

func TestHTTPBadInput(t *testing.T) {
	h := newHTTPTool(t, HTTPConfig{AllowedHosts: []string{"api.example.com"}})
	big := strings.Repeat("x", maxRequestBodyBytes+1)
	tests := []struct{ input, want string }{
		{`{"url":"https://api.example.com/"}`, `method "": want one of GET`},
		{`{"method":"FETCH","url":"https://api.example.com/"}`, `method "FETCH"`},
		{`{"method":"GET"}`, "url is required"},
		{`{"method":"GET","url":7}`, `field "url" must be a string, not number`},
		{`{"method":"GET","url":"https://api.example.com/","headers":["a"]}`, `field "headers" must be an object, not array`},
		{`{"method":"GET","url":"https://api.example.com/","headers":{"a":1}}`, `must be a string, not number`},
		{`{"method":"GET","url":"https://api.example.com/","timeout":3}`, `unknown field "timeout"`},
		{`{"method":"GET","url":"file:///etc/passwd"}`, "only http and https URLs are allowed"},
		{`{"method":"GET","url":"ftp://api.example.com/"}`, "only http and https URLs are allowed"},
		{`{"method":"GET","url":"api.example.com/x"}`, "only http and https URLs are allowed"},
		{`{"method":"GET","url":"https:///x"}`, "has no host"},
		{`{"method":"GET","url":"https://u:p@api.example.com/"}`, "send credentials in headers instead"},
		{`{"method":"GET","url":"https://api.example.com/","headers":{"Host":"evil.org"}}`, "header Host is set by the service"},
		{`{"method":"GET","url":"https://api.example.com/","headers":{"X-A":"1\r\nX-B: 2"}}`, "may not contain line breaks"},
		{`{"method":"GET","url":"https://api.example.com/","headers":{"Bad Name":"1"}}`, `header name "Bad Name" is not valid`},
		{fmt.Sprintf(`{"method":"POST","url":"https://api.example.com/","body":%q}`, big), "body is 1048577 bytes; the limit is 1048576"},
	}
	for _, tt := range tests {
		_, err := call(t, h, tt.input)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) {
			in := tt.input
			if len(in) > 200 {
				in = in[:200]
			}
			t.Errorf("%s: err = %v, want %q", in, err, tt.want)
		}
	}
}

// TestURLHost checks the host http_request's spec gives the policy for
// its url argument.
func TestURLHost(t *testing.T) {
	h, err := NewHTTP(HTTPConfig{AllowedHosts: []string{"api.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	host := h.Spec().Args["url"].Host
	if host == nil {
		t.Fatal("http_request's spec declares no host for its url argument")
	}
	tests := []struct{ url, host string }{
		{"https://API.Example.com:8443/x?y=1", "api.example.com"},
		{"http://api.example.com./", "api.example.com"},
		{"http://[::1]:8080/", "::1"},
		{"http://127.0.0.1/", "127.0.0.1"},
	}
	for _, tt := range tests {
		if got, ok := host(tt.url); !ok || got != tt.host {
			t.Errorf("host(%s) = %q, %v; want %q", tt.url, got, ok, tt.host)
		}
	}
	for _, bad := range []string{"", "file:///x", "3", "ftp://x.org/"} {
		if got, ok := host(bad); ok {
			t.Errorf("host(%q) = %q, want none", bad, got)
		}
	}
}

func TestHostPattern(t *testing.T) {
	tests := []struct {
		pattern, url string
		match        bool
	}{
		{"api.example.com", "https://api.example.com/", true},
		{"api.example.com", "http://API.EXAMPLE.COM./", true},
		{"api.example.com", "https://api.example.com:443/", true},
		{"api.example.com", "https://api.example.com:8443/", false},
		{"api.example.com", "http://api.example.com:443/", false},
		{"api.example.com:8443", "https://api.example.com:8443/", true},
		{"api.example.com:8443", "https://api.example.com/", false},
		{"*.example.com", "https://a.b.example.com/", true},
		{"*.example.com", "https://example.com/", false},
		{"*.example.com", "https://evilexample.com/", false},
		{"127.0.0.1:8080", "http://127.0.0.1:8080/", true},
		{"127.0.0.1:8080", "http://127.0.0.2:8080/", false},
		{"[::1]:8080", "http://[0:0::1]:8080/", true},
	}
	for _, tt := range tests {
		p, err := parseHostPattern(tt.pattern)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(tt.url)
		if got := p.matches(u); got != tt.match {
			t.Errorf("%q matches %q = %v, want %v", tt.pattern, tt.url, got, tt.match)
		}
	}
	for _, bad := range []string{"*", "a*b.example.com", "*.", "host:99999", "host:x", "http://x/", "u@host"} {
		if _, err := NewHTTP(HTTPConfig{AllowedHosts: []string{bad}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("pattern %q: err = %v", bad, err)
		}
	}
	if _, err := NewHTTP(HTTPConfig{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("no hosts: err = %v", err)
	}
}

func TestHTTPRedact(t *testing.T) {
	h := newHTTPTool(t, HTTPConfig{
		AllowedHosts: []string{"api.example.com"},
		Secrets:      map[string]map[string]string{"api.example.com": {"Authorization": "Bearer tok-0123456789", "X-Short": "abc"}},
	})
	got := h.redact("auth=Bearer tok-0123456789 token=tok-0123456789 short=abc")
	if want := "auth=[secret] token=[secret] short=abc"; got != want {
		t.Errorf("redact = %q, want %q", got, want)
	}
}

func TestHTTPSecretsMostSpecificWins(t *testing.T) {
	h := newHTTPTool(t, HTTPConfig{
		AllowedHosts: []string{"*.example.test"},
		Secrets: map[string]map[string]string{
			"*.example.test":     {"X-Key": "wildcard"},
			"api.example.test":   {"X-Key": "api"},
			"*.eu.example.test":  {"X-Key": "eu"},
			"a.api.example.test": {"X-Key": "a-api"},
		},
	})
	var order []string
	for _, s := range h.secrets {
		order = append(order, s.pattern.String())
	}
	if got, want := strings.Join(order, " "), "a.api.example.test api.example.test *.eu.example.test *.example.test"; got != want {
		t.Errorf("secrets are tried in the order %s, want %s", got, want)
	}
}
