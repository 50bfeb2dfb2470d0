package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// buildPortServer builds testdata/portserver, static, for the sandboxes.
func buildPortServer(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "portserver")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, "./test/e2e/testdata/portserver")
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the port server: %v\n%s", err, b)
	}
	return out
}

// portClient reaches the service whatever host a URL names (a port host
// under localhost), carrying token as a bearer unless it is "".
func (s *service) portClient(token string, jar http.CookieJar) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", s.addr)
		},
		MaxIdleConnsPerHost: 256,
	}
	s.t.Cleanup(tr.CloseIdleConnections)
	var rt http.RoundTripper = tr
	if token != "" {
		rt = bearerOver{token, tr}
	}
	return &http.Client{Transport: rt, Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// bearerOver adds a bearer token to every request it sends through rt.
type bearerOver struct {
	token string
	rt    http.RoundTripper
}

func (b bearerOver) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

// get returns a GET's status and body.
func get(t *testing.T, c *http.Client, url string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if strings.EqualFold(hdr[i], "Host") {
			req.Host = hdr[i+1]
		} else {
			req.Header.Add(hdr[i], hdr[i+1])
		}
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// TestPorts: a URL on the service reaches servers inside gVisor and runc
// sandboxes — python's http.server, a WebSocket echo — with the owner's
// token or a signed link, never another tenant's; reins' credentials never
// reach the sandbox; nothing listening, a stopped sandbox and hostile
// hosts are answered in words; connections per sandbox are bounded.
func TestPorts(t *testing.T) {
	s := startService(t)
	acme, beta := s.newTenant("acme"), s.newTenant("beta")
	bin := buildPortServer(t)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			s.t = t
			checkPorts(t, s, backend, acme, beta, bin)
		})
	}
}

func checkPorts(t *testing.T, s *service, backend, acme, beta, bin string) {
	sb := strings.TrimSpace(s.asTenant(acme, "sandbox", "create", "--backend", backend, "--image", "debian").stdout)
	if sb == "" {
		t.Fatal("create printed no id")
	}
	t.Cleanup(func() { s.run("sandbox", "rm", sb) })
	mustT := func(args ...string) string {
		t.Helper()
		r := s.asTenant(acme, args...)
		if r.code != 0 {
			t.Fatalf("reins %s: %s", strings.Join(args, " "), r)
		}
		return r.stdout
	}
	mustT("sandbox", "exec", sb, "--", "sh", "-c", "mkdir -p /srv && echo hello from the sandbox > /srv/index.txt")
	mustT("sandbox", "exec", "-d", sb, "--", "sh", "-c", "cd /srv && exec python3 -m http.server 3000 --bind 127.0.0.1")
	mustT("sandbox", "cp", bin, sb+":/portserver")
	mustT("sandbox", "exec", "-d", sb, "--", "/portserver", "-addr", "127.0.0.1:3001")

	url := strings.TrimSpace(mustT("sandbox", "port", sb, "3000"))
	_, svcPort, _ := net.SplitHostPort(s.addr)
	if want := "http://3000-" + sb + ".localhost:" + svcPort + "/"; url != want {
		t.Fatalf("sandbox port printed %q, want %q", url, want)
	}
	url3001 := strings.Replace(url, "3000-", "3001-", 1)
	owner := s.portClient(acme, nil)
	for _, u := range []string{url + "index.txt", url3001 + "headers"} {
		eventually(t, 30*time.Second, "the servers in the sandbox answer through "+u, func() (bool, string) {
			code, body, _ := get(t, owner, u)
			return code == 200, fmt.Sprint(code, " ", body)
		})
	}
	if code, body, _ := get(t, owner, url+"index.txt"); code != 200 || body != "hello from the sandbox\n" {
		t.Errorf("GET index.txt: %d %q", code, body)
	}
	if code, body, _ := get(t, s.portClient(s.token, nil), url+"index.txt"); code != 200 || body != "hello from the sandbox\n" {
		t.Errorf("GET index.txt with the admin's token: %d %q", code, body)
	}

	// Credentials: none is 401, another tenant's token 404 worded as a
	// sandbox that does not exist; the token as a cookie works.
	anon := s.portClient("", nil)
	noCreds, noCredsBody, _ := get(t, anon, url+"index.txt")
	if noCreds != 401 || !strings.Contains(noCredsBody, "needs a reins token") {
		t.Errorf("no token: %d %q, want 401 saying a token is needed", noCreds, noCredsBody)
	}
	missing := strings.Replace(url, sb, "0123456789ab", 1)
	otherCode, otherBody, _ := get(t, s.portClient(beta, nil), url+"index.txt")
	missCode, missBody, _ := get(t, s.portClient(beta, nil), missing+"index.txt")
	if otherCode != 404 || otherCode != missCode || otherBody != missBody {
		t.Errorf("another tenant's token: %d %q; a missing sandbox: %d %q; want the same 404", otherCode, otherBody, missCode, missBody)
	}
	if code, body, _ := get(t, anon, url+"index.txt", "Cookie", "reins_token="+acme); code != 200 || body != "hello from the sandbox\n" {
		t.Errorf("the token as a cookie: %d %q", code, body)
	}

	checkPortHeaders(t, s, owner, url3001, acme)
	checkPortLinks(t, s, sb, acme, noCreds, noCredsBody, mustT)
	checkPortWebSocket(t, s, url3001, acme)

	// Nothing listening: 502, in words.
	if code, body, _ := get(t, owner, strings.Replace(url, "3000-", "4000-", 1)); code != 502 || !strings.Contains(body, "nothing listens on port 4000 in the sandbox") {
		t.Errorf("a port nothing listens on: %d %q", code, body)
	}
	// A tenant asking for a port outside 1-65535 is told so.
	if r := s.asTenant(acme, "sandbox", "port", sb, "70000"); r.code == 0 || !strings.Contains(r.stderr, "1 to 65535") {
		t.Errorf("sandbox port 70000: %s", r)
	}

	checkPortHostileHosts(t, s, owner, sb, svcPort)
	checkPortBound(t, s, owner, url3001)
}

// checkPortHeaders: what reaches the sandbox has no reins token (header
// or cookie), no link cookie or parameter; the app's own cookie and the
// host pass.
func checkPortHeaders(t *testing.T, s *service, owner *http.Client, url3001, acme string) {
	code, body, _ := get(t, owner, url3001+"headers?x=1", "Cookie", "app=1; reins_token="+acme+"; reins_link=1.abc")
	if code != 200 {
		t.Fatalf("GET /headers: %d %q", code, body)
	}
	var seen struct {
		Host   string
		Query  string
		Header map[string][]string
	}
	if err := json.Unmarshal([]byte(body), &seen); err != nil {
		t.Fatalf("/headers: %q: %v", body, err)
	}
	if strings.Contains(body, acme) || strings.Contains(body, s.token) || strings.Contains(body, "reins_") {
		t.Errorf("the sandbox saw reins' credentials: %s", body)
	}
	if got := seen.Header["Cookie"]; len(got) != 1 || got[0] != "app=1" {
		t.Errorf("the sandbox got cookies %q, want only app=1", got)
	}
	if _, ok := seen.Header["Authorization"]; ok {
		t.Errorf("the sandbox got an Authorization header")
	}
	if seen.Query != "x=1" || !strings.HasPrefix(seen.Host, "3001-") {
		t.Errorf("the sandbox got host %q, query %q", seen.Host, seen.Query)
	}
}

// checkPortLinks: a signed link sets a host-only HttpOnly cookie and
// redirects to the clean URL; it works until it expires, then is as no
// credentials; a forged one is too.
func checkPortLinks(t *testing.T, s *service, sb, acme string, noCreds int, noCredsBody string, mustT func(...string) string) {
	var link struct {
		URL             string  `json:"url"`
		ExpiresUnixNano wireInt `json:"expires_unix_nano"`
	}
	out := mustT("sandbox", "port", sb, "3001", "--public", "--ttl", "4s", "--json")
	if err := json.Unmarshal([]byte(out), &link); err != nil || !strings.Contains(link.URL, "?reins_link=") || link.ExpiresUnixNano <= 0 {
		t.Fatalf("sandbox port --public --json: %q (%v)", out, err)
	}
	jar, _ := cookiejar.New(nil)
	visitor := s.portClient("", jar)
	code, _, hdr := get(t, visitor, link.URL)
	cookie := hdr.Get("Set-Cookie")
	if code != 302 || hdr.Get("Location") != "/" || !strings.Contains(cookie, "HttpOnly") || strings.Contains(strings.ToLower(cookie), "domain=") {
		t.Errorf("first visit of a link: %d, Location %q, Set-Cookie %q; want 302 to / with a host-only HttpOnly cookie", code, hdr.Get("Location"), cookie)
	}
	base := strings.SplitN(link.URL, "?", 2)[0]
	code, body, _ := get(t, visitor, base+"headers")
	if code != 200 || strings.Contains(body, "reins_") || strings.Contains(body, acme) {
		t.Errorf("a visit with the link's cookie: %d %q; want 200 and no reins_ credentials in the sandbox", code, body)
	}
	// The same link for another port, or with its signature changed: no.
	other := strings.Replace(link.URL, "3001-", "3000-", 1)
	if code, body, _ := get(t, s.portClient("", nil), other); code != noCreds || body != noCredsBody {
		t.Errorf("a link moved to another port: %d %q", code, body)
	}
	if code, _, _ := get(t, s.portClient("", nil), link.URL[:len(link.URL)-2]+"xx"); code != noCreds {
		t.Errorf("a forged link: %d", code)
	}
	time.Sleep(5 * time.Second) // past the link's 4s
	if code, body, _ := get(t, s.portClient("", nil), link.URL); code != noCreds || body != noCredsBody {
		t.Errorf("an expired link: %d %q, want %d %q", code, body, noCreds, noCredsBody)
	}
	if code, _, _ := get(t, visitor, base+"headers", "Cookie", "reins_link="+strings.SplitN(link.URL, "=", 2)[1]); code != noCreds {
		t.Errorf("an expired link's cookie: %d", code)
	}
}

// checkPortWebSocket: a WebSocket through the URL exchanges messages with
// the echo server in the sandbox.
func checkPortWebSocket(t *testing.T, s *service, url3001, acme string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, strings.Replace(url3001, "http://", "ws://", 1)+"ws", &websocket.DialOptions{
		HTTPClient: s.portClient(acme, nil),
	})
	if err != nil {
		t.Fatalf("WebSocket through the port URL: %v", err)
	}
	defer ws.CloseNow()
	for i := range 3 {
		msg := fmt.Sprintf("message %d", i)
		if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_, got, err := ws.Read(ctx)
		if err != nil || string(got) != "echo: "+msg {
			t.Fatalf("WebSocket echo: %q, %v", got, err)
		}
	}
	ws.Close(websocket.StatusNormalClosure, "")
}

// TestPortsStoppedSandbox: a port URL of a sandbox that stopped answers
// 502 saying it stopped and why.
func TestPortsStoppedSandbox(t *testing.T) {
	s := startService(t)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			s.t = t
			id := s.create("--backend", backend, "--ttl", "3s", "--on-expire", "delete")
			url := strings.TrimSpace(s.must("sandbox", "port", id, "8080"))
			owner := s.portClient(s.token, nil)
			eventually(t, 30*time.Second, "the sandbox stops", func() (bool, string) {
				out := s.must("sandbox", "show", id)
				return strings.Contains(out, "ttl_expired"), out
			})
			code, body, _ := get(t, owner, url)
			if code != 502 || !strings.Contains(body, "sandbox "+id+" stopped (ttl_expired") {
				t.Errorf("a stopped sandbox's port: %d %q, want 502 saying it stopped (ttl_expired)", code, body)
			}
			if strings.Contains(body, s.dataDir) {
				t.Errorf("the answer names a host path: %q", body)
			}
		})
	}
}
