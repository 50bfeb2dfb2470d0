package manager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor"
	"github.com/reinsdev/reins/executor/client"
	"github.com/reinsdev/reins/gateway"
	"github.com/reinsdev/reins/internal/testenv"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/gvisor"
	"github.com/reinsdev/reins/sandbox/runc"
)

// The executor keeps its own copy of the gateway's address (it does not
// import the brain's packages): they must agree.
func TestGatewayAddrAgrees(t *testing.T) {
	if executor.GatewayAddr != gateway.Addr || gateway.Addr != fmt.Sprintf("127.0.0.1:%d", gateway.Port) {
		t.Fatalf("executor.GatewayAddr %q, gateway.Addr %q, gateway.Port %d disagree", executor.GatewayAddr, gateway.Addr, gateway.Port)
	}
}

// whoAmI answers a gateway request with the sandbox it came from and
// whether its x-api-key is that sandbox's token, as the manager says.
func whoAmI(m *atomic.Pointer[Manager]) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := gateway.SandboxFrom(r.Context())
		fmt.Fprintf(w, "sandbox=%s auth=%v path=%s", id, m.Load().AuthorizeGateway(r.Context(), id, r.Header.Get("x-api-key")), r.URL.Path)
	})
}

// callGateway is the program in the sandbox: wget to the gateway with a
// key (the sandbox's own, from its env, unless key is given).
func callGateway(key string) string {
	if key == "" {
		key = "$ANTHROPIC_API_KEY"
	}
	return `wget -qO- --header "x-api-key: ` + key + `" http://` + gateway.Addr + `/v1/messages`
}

func sh(t *testing.T, c *client.Client, script string, env ...string) string {
	t.Helper()
	var out, errOut strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	exit, err := c.Exec(ctx, &executorv1.ExecRequest{Argv: []string{"sh", "-c", script}, Env: env}, func(ev *executorv1.ExecEvent) {
		out.Write(ev.GetStdout())
		errOut.Write(ev.GetStderr())
	})
	if err != nil || exit.GetExitCode() != 0 {
		t.Fatalf("sh -c %q: %v, exit %v, stderr %s", script, err, exit, errOut.String())
	}
	return out.String()
}

func TestGatewayGVisor(t *testing.T) {
	testenv.RequiresRoot(t)
	runsc := testenv.RequiresRunsc(t, gvisor.DefaultRunsc())
	testGateway(t, "gvisor", func(dir string) (sandbox.Backend, error) {
		return gvisor.New(filepath.Join(dir, "runsc"), gvisor.WithBinary(runsc))
	})
}

func TestGatewayRunc(t *testing.T) {
	testenv.RequiresRoot(t)
	testenv.RequiresBinary(t, "runc", "runc")
	testGateway(t, "runc", func(dir string) (sandbox.Backend, error) { return runc.New(filepath.Join(dir, "runc")) })
}

// testGateway: a program in a sandbox made with the gateway reaches the
// service's handler, which knows the sandbox it came from; a gateway
// turned on later works for the exec given its env; one sandbox's token
// is refused from another, and once its sandbox is gone; connections
// made while the service is down are served after its restart; suspend
// and wake bring it back; rm ends it.
func testGateway(t *testing.T, name string, newBackend func(dir string) (sandbox.Backend, error)) {
	dir := t.TempDir()
	exe := buildExecutor(t, dir)
	backend, err := newBackend(dir)
	if err != nil {
		t.Fatal(err)
	}
	var cur atomic.Pointer[Manager]
	withGW := func(c *Config) { c.Gateway = whoAmI(&cur) }
	m := realManager(t, dir, exe, name, backend, withGW)
	cur.Store(m)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	a, err := m.Create(ctx, "", sandbox.Spec{Image: "busybox", Gateway: &sandbox.GatewaySpec{Model: "script:turns", Script: `{"turns":[]}`}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cur.Load().Delete(context.Background(), "", a.ID) }()
	bInfo, err := m.Create(ctx, "", sandbox.Spec{Image: "busybox"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cur.Load().Delete(context.Background(), "", bInfo.ID) }()
	ca, _ := m.Client(ctx, "", a.ID)
	cb, _ := m.Client(ctx, "", bInfo.ID)

	if got, want := sh(t, ca, callGateway("")), "sandbox="+a.ID+" auth=true path=/v1/messages"; got != want {
		t.Fatalf("from a sandbox made with the gateway: %q, want %q", got, want)
	}
	env := sh(t, ca, "env")
	tokA := ""
	for _, kv := range gateway.Env("") {
		k, _, _ := strings.Cut(kv, "=")
		i := strings.Index(env, k+"=")
		if i < 0 {
			t.Fatalf("%s missing from the sandbox's env:\n%s", k, env)
		}
		if strings.HasSuffix(k, "_KEY") {
			tokA, _, _ = strings.Cut(env[i+len(k)+1:], "\n")
		}
	}
	if !strings.HasPrefix(tokA, gateway.TokenPrefix) || len(tokA) < len(gateway.TokenPrefix)+64 {
		t.Fatalf("the sandbox's token %q is not %s and 32 random bytes", tokA, gateway.TokenPrefix)
	}
	if tenant, model, script, err := m.GatewayOf(ctx, a.ID); err != nil || tenant != "" || model != "script:turns" || script != `{"turns":[]}` {
		t.Fatalf("GatewayOf = %q %q %q %v", tenant, model, script, err)
	}

	// Turned on later: the sandbox's env is untouched, the exec given the
	// env gets there.
	if _, _, _, err := m.GatewayOf(ctx, bInfo.ID); err == nil {
		t.Fatal("GatewayOf a sandbox without a gateway: no error")
	}
	envB, err := m.EnableGateway(ctx, bInfo.ID)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := m.EnableGateway(ctx, bInfo.ID); err != nil || strings.Join(again, " ") != strings.Join(envB, " ") {
		t.Fatalf("EnableGateway again: %v, %v; want the same env", again, err)
	}
	// Turned on for an agent run, not the sandbox's own: no record (and
	// no unbudgeted calls) once the run is over.
	if _, _, _, err := m.GatewayOf(ctx, bInfo.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("GatewayOf a sandbox whose gateway a run turned on: %v, want a failed precondition", err)
	}
	if got := sh(t, cb, "echo ${ANTHROPIC_API_KEY:-none}"); got != "none\n" {
		t.Fatalf("the sandbox's own env changed: ANTHROPIC_API_KEY=%q", got)
	}
	if got, want := sh(t, cb, callGateway(""), envB...), "sandbox="+bInfo.ID+" auth=true path=/v1/messages"; got != want {
		t.Fatalf("from a sandbox whose gateway was turned on later: %q, want %q", got, want)
	}
	// A sandbox where a process took the port first is refused in words.
	cInfo, err := m.Create(ctx, "", sandbox.Spec{Image: "busybox"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cur.Load().Delete(context.Background(), "", cInfo.ID) }()
	cc, _ := m.Client(ctx, "", cInfo.ID)
	if _, err := cc.Start(ctx, &executorv1.ExecRequest{Argv: []string{"httpd", "-f", "-p", gateway.Addr}}); err != nil {
		t.Fatal(err)
	}
	// nc listens (47070 is B7DE in /proc/net/tcp*; 0A is LISTEN).
	sh(t, cc, `for i in $(seq 100); do cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -q ':B7DE [0-9A-F:]* 0A ' && exit 0; sleep 0.1; done; cat /proc/net/tcp /proc/net/tcp6 >&2; exit 1`)
	_, squatErr := m.EnableGateway(ctx, cInfo.ID)
	if !errors.Is(squatErr, errdefs.ErrFailedPrecondition) || !strings.Contains(squatErr.Error(), "port 47070 is in use in the sandbox") {
		t.Fatalf("EnableGateway with the port taken: %v, want \"port 47070 is in use in the sandbox\"", squatErr)
	}

	// A's token, used from B, is refused: the connection names B.
	if got, want := sh(t, cb, callGateway(tokA)), "sandbox="+bInfo.ID+" auth=false path=/v1/messages"; got != want {
		t.Fatalf("A's token from B: %q, want %q", got, want)
	}

	// The service dies (sandboxes live on): a connection made meanwhile
	// waits in the executor and is served by the next service.
	rec := m.boxes[a.ID].rec
	m.Close()
	direct, err := client.Dial(ctx, rec.Endpoint.Unix, rec.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if _, err := direct.Start(ctx, &executorv1.ExecRequest{Argv: []string{"sh", "-c", callGateway("") + " > /tmp/answer.new && mv /tmp/answer.new /tmp/answer"}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the connection is made with no service
	if out := sh(t, direct, "cat /tmp/answer 2>/dev/null || echo none"); out != "none\n" {
		t.Fatalf("answered with no service: %q", out)
	}
	m = realManager(t, dir, exe, name, backend, withGW)
	cur.Store(m)
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	want := "sandbox=" + a.ID + " auth=true path=/v1/messages"
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := sh(t, direct, "cat /tmp/answer 2>/dev/null || echo none")
		if out == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the connection made while the service was down got %q, want %q", out, want)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Suspend and wake: the gateway comes back with the sandbox.
	if err := m.Suspend(ctx, "", a.ID); err != nil {
		t.Fatal(err)
	}
	if m.AuthorizeGateway(ctx, a.ID, tokA) != true {
		t.Fatal("a suspended sandbox's token is refused: it lives until the sandbox is gone")
	}
	if woke, err := m.Wake(ctx, "", a.ID); err != nil || !woke {
		t.Fatalf("Wake: %v %v", woke, err)
	}
	ca, _ = m.Client(ctx, "", a.ID)
	if got := sh(t, ca, callGateway("")); got != want {
		t.Fatalf("after a wake: %q, want %q", got, want)
	}

	// rm ends its server and its token.
	if err := m.Delete(ctx, "", a.ID); err != nil {
		t.Fatal(err)
	}
	if m.AuthorizeGateway(ctx, a.ID, tokA) {
		t.Fatal("the token of a removed sandbox is still good")
	}
	if m.AuthorizeGateway(ctx, bInfo.ID, "") || m.AuthorizeGateway(ctx, bInfo.ID, tokA) {
		t.Fatal("a wrong or empty token is good")
	}
}

// TestGatewaySilentClients: connections that never send a byte, more of
// them than a sandbox may have open, are closed after the header timeout
// and do not keep the sandbox's own calls out for good.
func TestGatewaySilentClients(t *testing.T) {
	testenv.RequiresRoot(t)
	runsc := testenv.RequiresRunsc(t, gvisor.DefaultRunsc())
	old := gatewayHeaderTimeout
	gatewayHeaderTimeout = 3 * time.Second
	defer func() { gatewayHeaderTimeout = old }()
	dir := t.TempDir()
	exe := buildExecutor(t, dir)
	gv, err := gvisor.New(filepath.Join(dir, "runsc"), gvisor.WithBinary(runsc))
	if err != nil {
		t.Fatal(err)
	}
	var cur atomic.Pointer[Manager]
	m := realManager(t, dir, exe, "gvisor", gv, func(c *Config) { c.Gateway = whoAmI(&cur) })
	cur.Store(m)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	info, err := m.Create(ctx, "", sandbox.Spec{Image: "busybox", Gateway: &sandbox.GatewaySpec{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(context.Background(), "", info.ID)
	c, _ := m.Client(ctx, "", info.ID)
	// Each nc holds a connection open and sends nothing; it exits when
	// the service closes it.
	flood := fmt.Sprintf(`for i in $(seq %d); do sleep 600 | nc 127.0.0.1 47070 >/dev/null & done; wait`, gatewayMaxConns+10)
	open := `ps | grep -c ' nc 127.0.0.1 47070$'`
	if _, err := c.Start(ctx, &executorv1.ExecRequest{Argv: []string{"sh", "-c", flood}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // they connect
	got := sh(t, c, "timeout 30 "+callGateway(""))
	if want := "sandbox=" + info.ID + " auth=true path=/v1/messages"; got != want {
		t.Fatalf("a call behind %d silent connections: %q, want %q", gatewayMaxConns+10, got, want)
	}
	if n := sh(t, c, "for i in $(seq 40); do [ $("+open+") = 0 ] && break; sleep 0.25; done; "+open+" || true"); strings.TrimSpace(n) != "0" {
		t.Fatalf("%s of %d silent connections still open after the header timeout", strings.TrimSpace(n), gatewayMaxConns+10)
	}
}
