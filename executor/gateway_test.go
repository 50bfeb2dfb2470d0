package executor_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor"
	"github.com/reinsdev/reins/executor/client"
)

// freeAddr is a loopback address nothing listens on (the test's loopback
// stands in for the sandbox's; 47070 itself may be taken on a shared host).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func withGateway(addr string, on bool) func(*executor.Config) {
	return func(c *executor.Config) { c.GatewayAddr, c.Gateway = addr, on }
}

// serveGateway serves h on the executor's gateway connections, as the
// service does, until the test ends.
func serveGateway(t *testing.T, c *client.Client, h http.Handler) {
	t.Helper()
	l := c.GatewayListener(3, 32, nil)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { srv.Serve(l); close(done) }()
	t.Cleanup(func() { srv.Close(); <-done })
}

// echo answers with the request's method, path and body.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, body)
})

func get(t *testing.T, hc *http.Client, url, body string) string {
	t.Helper()
	resp, err := hc.Post(url, "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// answer reads the HTTP answer on program connection i.
func answer(t *testing.T, i int, c net.Conn) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("connection %d: %v", i, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return string(b)
}

// TestGatewaySplicesBothWays: a program's connection reaches the service's
// accept whole, both ways, with its end of stream passed on.
func TestGatewaySplicesBothWays(t *testing.T) {
	addr := freeAddr(t)
	e := newEnv(t, withGateway(addr, true))
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := e.c.AcceptGateway(ctxT(t))
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	prog, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	msg := strings.Repeat("model call ", 100000) // 1.1 MB: many reads each way
	go func() {
		io.WriteString(prog, msg)
		prog.(*net.TCPConn).CloseWrite()
	}()
	svc := <-accepted
	if svc == nil {
		t.FailNow()
	}
	defer svc.Close()
	svc.SetDeadline(time.Now().Add(20 * time.Second))
	got, err := io.ReadAll(svc)
	if err != nil || string(got) != msg {
		t.Fatalf("service read %d bytes (%v), want %d", len(got), err, len(msg))
	}
	io.WriteString(svc, strings.ToUpper(msg))
	svc.(interface{ CloseWrite() error }).CloseWrite()
	prog.SetDeadline(time.Now().Add(20 * time.Second))
	back, err := io.ReadAll(prog)
	if err != nil || string(back) != strings.ToUpper(msg) {
		t.Fatalf("program read %d bytes (%v), want %d upper-cased", len(back), err, len(msg))
	}
	if st := e.srv.GatewayStats(); st.Accepted != 1 || st.Handed != 1 || st.Lost != 0 {
		t.Fatalf("stats %+v, want 1 accepted, 1 handed, none lost", st)
	}
}

// TestGatewayManyConnections: concurrent HTTP clients in the "sandbox" are
// each answered by the service's server over the listener.
func TestGatewayManyConnections(t *testing.T) {
	addr := freeAddr(t)
	e := newEnv(t, withGateway(addr, true))
	serveGateway(t, e.c, echo)
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 20 * time.Second}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			want := fmt.Sprintf("POST /v1/messages call-%d", i)
			if got := get(t, hc, "http://"+addr+"/v1/messages", fmt.Sprintf("call-%d", i)); got != want {
				t.Errorf("got %q, want %q", got, want)
			}
		})
	}
	wg.Wait()
	if st := e.srv.GatewayStats(); st.Handed != 40 || st.Lost != 0 {
		t.Fatalf("stats %+v, want 40 handed, none lost", st)
	}
}

// TestGatewayQueuesWhileNoAcceptWaits: connections made while the service
// is away (restarting) wait in the executor and are served, their first
// bytes included, once it is back; a cancelled accept loses none.
func TestGatewayQueuesWhileNoAcceptWaits(t *testing.T) {
	addr := freeAddr(t)
	e := newEnv(t, withGateway(addr, true))
	// An accept that gives up (the service dies) must leave the next
	// connection to the next accept.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := e.c.AcceptGateway(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("accept with nothing connecting: %v, want the deadline", err)
	}
	waitFor(t, "the given-up accept to end in the executor", func() bool { return e.srv.GatewayStats().Waiting == 0 })
	const n = 10
	progs := make([]net.Conn, n)
	for i := range progs {
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/messages HTTP/1.1\r\nHost: gw\r\nContent-Length: 1\r\nConnection: close\r\n\r\n%d", i)
		progs[i] = c
	}
	waitFor(t, "10 queued connections", func() bool { return e.srv.GatewayStats().Queued == n })
	serveGateway(t, e.c, echo)
	for i, c := range progs {
		if b := answer(t, i, c); b != fmt.Sprintf("POST /v1/messages %d", i) {
			t.Fatalf("connection %d got %q", i, b)
		}
	}
	if st := e.srv.GatewayStats(); st.Handed != n || st.Lost != 0 {
		t.Fatalf("stats %+v, want %d handed (the given-up accept got none) and none lost", st, n)
	}
}

// TestGatewayFloodIsBounded: a flood of connections nobody serves holds at
// most MaxGatewayQueue of them in the executor (the rest wait in the
// kernel's backlog, counted as a full queue), and all are served, none
// lost, once the service accepts.
func TestGatewayFloodIsBounded(t *testing.T) {
	addr := freeAddr(t)
	e := newEnv(t, withGateway(addr, true))
	const n = executor.MaxGatewayQueue + 300
	progs := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range progs {
			c.Close()
		}
	}()
	for range n {
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "GET /x HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
		progs = append(progs, c)
	}
	waitFor(t, "a full queue", func() bool { return e.srv.GatewayStats().QueueFull > 0 })
	time.Sleep(100 * time.Millisecond) // room to overshoot, if it could
	st := e.srv.GatewayStats()
	if st.Queued != executor.MaxGatewayQueue || st.Accepted > executor.MaxGatewayQueue+1 {
		t.Fatalf("stats %+v: want the queue at %d and no more accepted than one past it", st, executor.MaxGatewayQueue)
	}
	serveGateway(t, e.c, echo)
	for i, c := range progs {
		answer(t, i, c)
	}
	if st := e.srv.GatewayStats(); st.Handed != n || st.Lost != 0 {
		t.Fatalf("stats %+v, want %d handed and none lost", st, n)
	}
}

// TestGatewayClose: closing the executor closes queued and handed-over
// connections alike, and ends the listener (goleak in TestMain).
func TestGatewayClose(t *testing.T) {
	addr := freeAddr(t)
	e := newEnv(t, withGateway(addr, true))
	handed, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer handed.Close()
	svc, err := e.c.AcceptGateway(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	queued, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer queued.Close()
	waitFor(t, "a queued connection", func() bool { return e.srv.GatewayStats().Queued == 1 })
	e.srv.Close()
	for name, c := range map[string]net.Conn{"handed over": handed, "queued": queued, "service's": svc} {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Errorf("the %s connection is still open after Close", name)
		}
	}
	if _, err := net.Dial("tcp4", addr); err == nil {
		t.Error("the gateway still listens after Close")
	}
}

// TestGatewayListenOnRunning: a gateway turned on later listens, a second
// time is a no-op; before, an accept is refused in words; a port a process
// took first is refused as in use, at start and later.
func TestGatewayListenOnRunning(t *testing.T) {
	addr := freeAddr(t)
	e := newEnv(t, withGateway(addr, false))
	_, err := e.c.AcceptGateway(ctxT(t))
	wantKind(t, err, errdefs.ErrFailedPrecondition, "not on in this sandbox")
	for range 2 {
		if err := e.c.StartGateway(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	serveGateway(t, e.c, echo)
	hc := &http.Client{Timeout: 20 * time.Second}
	if got := get(t, hc, "http://"+addr+"/v1/responses", "hi"); got != "POST /v1/responses hi" {
		t.Fatalf("got %q", got)
	}

	squat, err := net.Listen("tcp4", freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer squat.Close()
	_, port, _ := net.SplitHostPort(squat.Addr().String())
	e2 := newEnv(t, withGateway(squat.Addr().String(), false))
	wantKind(t, e2.c.StartGateway(ctxT(t)), errdefs.ErrFailedPrecondition, "port "+port+" is in use in the sandbox")
	_, err = executor.New(executor.Config{Root: t.TempDir(), Token: testToken, Gateway: true, GatewayAddr: squat.Addr().String()})
	if err == nil || !strings.Contains(err.Error(), "port "+port+" is in use in the sandbox") {
		t.Fatalf("New with a taken gateway port: %v, want \"port %s is in use in the sandbox\"", err, port)
	}
}

// TestGatewayRefusals: a wrong token, a request that is no upgrade, a GET.
func TestGatewayRefusals(t *testing.T) {
	addr := freeAddr(t)
	e := newEnv(t, withGateway(addr, true))
	wrong, err := client.Dial(ctxT(t), e.sock, "wrong-token")
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	_, err = wrong.AcceptGateway(ctxT(t))
	wantKind(t, err, errdefs.ErrUnauthenticated)
	wantKind(t, wrong.StartGateway(ctxT(t)), errdefs.ErrUnauthenticated)
	hc := &http.Client{Transport: e.c.Transport("")}
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"POST", executor.GatewayAcceptPath, http.StatusBadRequest}, // HTTP/2, no upgrade
		{"GET", executor.GatewayListenPath, http.StatusMethodNotAllowed},
		{"POST", "/reins.gateway.v1/other", http.StatusNotFound},
	} {
		req, _ := http.NewRequest(tc.method, "http://executor"+tc.path, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want || len(body) == 0 {
			t.Errorf("%s %s: %d %q, want %d with a reason", tc.method, tc.path, resp.StatusCode, body, tc.want)
		}
	}
}

// TestGatewayHandoverNeedsAck: a service that got the 101 but died before
// its ack (it was killed while its accept waited) does not take the
// program's connection with it: the next accept gets it, bytes intact.
func TestGatewayHandoverNeedsAck(t *testing.T) {
	addr := freeAddr(t)
	e := newEnv(t, withGateway(addr, true))
	dead, err := net.Dial("unix", e.sock)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(dead, "POST "+executor.GatewayAcceptPath+" HTTP/1.1\r\nHost: executor\r\nAuthorization: Bearer "+testToken+
		"\r\nConnection: Upgrade\r\nUpgrade: "+executor.GatewayUpgrade+"\r\n\r\n")
	waitFor(t, "the accept to wait", func() bool { return e.srv.GatewayStats().Waiting == 1 })
	prog, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	io.WriteString(prog, "first bytes")
	dead.SetDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(dead), nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("the accept's answer: %v, %v; want 101", resp, err)
	}
	dead.Close() // no ack
	svc, err := e.c.AcceptGateway(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	svc.SetDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len("first bytes"))
	if _, err := io.ReadFull(svc, got); err != nil || string(got) != "first bytes" {
		t.Fatalf("the next accept read %q, %v; want the program's first bytes", got, err)
	}
	if st := e.srv.GatewayStats(); st.Handed != 1 || st.Lost != 0 || st.Accepted != 1 {
		t.Fatalf("stats %+v, want one connection accepted, handed once, none lost", st)
	}
}
