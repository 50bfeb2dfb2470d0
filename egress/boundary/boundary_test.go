package boundary

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/internal/testenv"
	"github.com/reinsdev/reins/sandbox"
)

type memSecrets map[string]string

func (m memSecrets) Has(ctx context.Context, tenant, name string) (bool, error) {
	_, ok := m[tenant+"/"+name]
	return ok, nil
}

func (m memSecrets) Get(ctx context.Context, tenant, name string) ([]byte, error) {
	v, ok := m[tenant+"/"+name]
	if !ok {
		return nil, fmt.Errorf("secret %s not found: %w", name, errdefs.ErrNotFound)
	}
	return []byte(v), nil
}

type entries struct {
	mu  sync.Mutex
	got []egress.Entry
}

func (e *entries) add(tenant string, en egress.Entry) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, en)
}

func (e *entries) find(host string, allowed bool) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, en := range e.got {
		if en.Host == host && en.Allowed == allowed {
			return true
		}
	}
	return false
}

// await waits a few seconds for an entry for host with the given verdict.
func (e *entries) await(host string, allowed bool) bool {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if e.find(host, allowed) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

func (e *entries) snapshot() []egress.Entry {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]egress.Entry(nil), e.got...)
}

// inNetNS runs f on a thread in the network namespace at path.
func inNetNS(t *testing.T, path string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		ns, err := os.Open(path)
		if err != nil {
			t.Error(err)
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			t.Error(err)
			return
		}
		f()
	}()
	<-done
}

// TestBoundary: a sandbox's namespace reaches an allowed host through the
// proxy with its secret put in, a denied one not at all; what the sandbox
// is given (files, environment) is right; Update and Detach take effect;
// unknown secrets refuse the attach.
func TestBoundary(t *testing.T) {
	testenv.RequiresRoot(t)
	var got sync.Map
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.URL.Path, r.Header.Get("Authorization"))
		io.WriteString(w, "hi from "+r.Host)
	}))
	defer up.Close()
	upAddr := netip.MustParseAddrPort(up.Listener.Addr().String())
	dir := t.TempDir()
	log := &entries{}
	b, err := New(Config{
		Dir:       filepath.Join(dir, "net"),
		Overrides: map[string][]netip.Addr{"allowed.test": {upAddr.Addr()}, "denied.test": {upAddr.Addr()}},
		Secrets:   memSecrets{"acme/TOKEN": "the-real-token"},
		Log:       log.add,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(filepath.Join(dir, "net", "router")); err == nil {
			data, _ := os.ReadFile("/proc/self/mountinfo")
			if strings.Contains(string(data), dir) {
				t.Error("the router namespace is still mounted after Close with no sandbox left")
			}
		}
	}()
	sbDir := filepath.Join(dir, "sb1")
	os.Mkdir(sbDir, 0o700)
	rules, err := egress.Rules{AllowHosts: []egress.HostRule{{Host: "allowed.test"}},
		Secrets: []egress.SecretRef{{Name: "TOKEN", Hosts: []string{"allowed.test"}}}}.Normalize(false)
	if err != nil {
		t.Fatal(err)
	}
	req := sandbox.NetworkRequest{ID: "sb1", Tenant: "acme", Dir: sbDir, Hostname: "sandbox-sb1", Rules: rules}

	// An unknown secret: no attach, nothing left.
	bad := req
	bad.Rules.Secrets = []egress.SecretRef{{Name: "NOPE", Hosts: []string{"allowed.test"}}}
	if err := b.Check(context.Background(), "acme", bad.Rules); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("check with an unknown secret: %v", err)
	}
	if err := b.Check(context.Background(), "beta", req.Rules); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("check of another tenant's secret: %v", err)
	}
	if err := b.Check(context.Background(), "acme", req.Rules); err != nil {
		t.Fatalf("check: %v", err)
	}
	if _, err := b.Attach(context.Background(), bad); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("attach with an unknown secret: %v", err)
	}
	if _, ok := b.router.Link("sb1"); ok {
		t.Fatal("a failed attach left a link")
	}

	nc, err := b.Attach(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Join(nc.Env, "\n")
	ph := nc.Placeholders["TOKEN"]
	if ph == "" || !strings.Contains(env, "TOKEN="+ph) || strings.Contains(env, "the-real-token") || !strings.Contains(env, "HTTP_PROXY=http://") {
		t.Fatalf("environment:\n%s", env)
	}
	if st, err := os.Stat(filepath.Join(sbDir, "ca.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("ca.key: %v %v", st, err)
	}
	for _, m := range nc.Mounts {
		if !m.ReadOnly || !strings.HasPrefix(m.Source, sbDir+"/net") {
			t.Errorf("mount %+v: want read-only, from the sandbox's net directory", m)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(sbDir, "net", "ca.key")); len(data) != 0 {
		t.Error("the CA's key is in the directory the sandbox sees")
	}
	resolv, _ := os.ReadFile(filepath.Join(sbDir, "net", "resolv.conf"))
	link, _ := b.router.Link("sb1")
	if !strings.Contains(string(resolv), "nameserver "+link.Gateway.String()) {
		t.Errorf("resolv.conf:\n%s", resolv)
	}
	// Attach again (a restarted service): same placeholder.
	req.Placeholders = nc.Placeholders
	nc2, err := b.Attach(context.Background(), req)
	if err != nil || nc2.Placeholders["TOKEN"] != ph || nc2.NetNS != nc.NetNS {
		t.Fatalf("re-attach: %+v, %v", nc2, err)
	}

	// From inside: through the explicit proxy, and to any address (the
	// firewall takes it to the proxy).
	proxyAddr := net.JoinHostPort(link.Gateway.String(), "3128")
	get := func(target, path, host string, viaProxy bool) (string, error) {
		var out string
		var rerr error
		inNetNS(t, nc.NetNS, func() {
			addr := target
			if viaProxy {
				addr = proxyAddr
			}
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				rerr = err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			uri := path
			if viaProxy {
				uri = "http://" + host + path
			}
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", uri, host, ph)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				rerr = err
				return
			}
			body, _ := io.ReadAll(resp.Body)
			out = resp.Status + " " + string(body)
		})
		return out, rerr
	}
	port := fmt.Sprint(upAddr.Port())
	if out, err := get("", "/proxied", "allowed.test:"+port, true); err != nil || !strings.Contains(out, "200") {
		t.Fatalf("through the proxy: %q %v", out, err)
	}
	if v, _ := got.Load("/proxied"); v != "Bearer the-real-token" {
		t.Errorf("the allowed host got Authorization %q", v)
	}
	if out, err := get("203.0.113.7:"+port, "/transparent", "allowed.test:"+port, false); err != nil || !strings.Contains(out, "200") {
		t.Fatalf("to an arbitrary address: %q %v", out, err)
	}
	if _, ok := got.Load("/transparent"); !ok {
		t.Error("the redirected request did not arrive")
	}
	if out, _ := get("", "/denied", "denied.test:"+port, true); strings.Contains(out, "200") {
		t.Errorf("a denied host: %q", out)
	}
	if _, ok := got.Load("/denied"); ok {
		t.Error("the denied request arrived")
	}
	// The proxy logs a connection when it closes, which can be after the
	// client has read its answer: wait for the entries.
	if !log.await("allowed.test", true) || !log.await("denied.test", false) {
		t.Errorf("log: %+v", log.snapshot())
	}

	// New rules: denied.test now, allowed.test no more.
	req.Rules.AllowHosts = []egress.HostRule{{Host: "denied.test"}}
	req.Rules.Secrets = nil
	if err := b.Update(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if out, _ := get("", "/after", "allowed.test:"+port, true); strings.Contains(out, "200") {
		t.Errorf("after the update, the old host: %q", out)
	}
	if out, err := get("", "/after2", "denied.test:"+port, true); err != nil || !strings.Contains(out, "200") {
		t.Errorf("after the update, the new host: %q %v", out, err)
	}

	if err := b.Detach(context.Background(), "sb1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(nc.NetNS); err == nil {
		t.Error("the namespace file is still there after Detach")
	}

	// A proxy that is not running: no sandbox is given a network it
	// cannot hold; nothing is left of the attempt.
	b.proxy.Close()
	if _, err := b.Attach(context.Background(), sandbox.NetworkRequest{ID: "sb3", Tenant: "acme", Dir: sbDir, Rules: rules}); err == nil {
		t.Error("attach with the proxy stopped succeeded")
	}
	if _, ok := b.router.Link("sb3"); ok {
		t.Error("a failed attach left a link")
	}

	// No secrets: no CA made, none trusted in the sandbox.
	plainDir := filepath.Join(dir, "sb4")
	os.Mkdir(plainDir, 0o700)
	plainRules, _ := egress.Rules{AllowHosts: []egress.HostRule{{Host: "allowed.test"}}}.Normalize(false)
	b2, err := New(Config{Dir: filepath.Join(dir, "net2"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := b2.Attach(context.Background(), sandbox.NetworkRequest{ID: "sb4", Dir: plainDir, Rules: plainRules})
	if err != nil {
		t.Fatal(err)
	}
	if len(plain.ExecutorArgs) != 0 {
		t.Errorf("a sandbox without secrets gets executor args %v", plain.ExecutorArgs)
	}
	for _, f := range []string{"ca.key", "net/ca.pem"} {
		if _, err := os.Stat(filepath.Join(plainDir, f)); err == nil {
			t.Errorf("%s made for a sandbox without secrets", f)
		}
	}
	b2.Detach(context.Background(), "sb4")
	if err := b2.Close(); err != nil {
		t.Error(err)
	}

	// --network none: a namespace of its own, no link, no environment.
	none, err := b.Attach(context.Background(), sandbox.NetworkRequest{ID: "sb2", Dir: sbDir, Rules: egress.Rules{Mode: egress.ModeNone}})
	if err != nil {
		t.Fatal(err)
	}
	if len(none.Env) != 0 || len(none.Mounts) != 0 {
		t.Errorf("none: %+v", none)
	}
	if err := b.Detach(context.Background(), "sb2"); err != nil {
		t.Fatal(err)
	}
}
