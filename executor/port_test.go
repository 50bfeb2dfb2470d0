package executor_test

import (
	"bufio"
	"errors"
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

// listenLoopback serves handle on a fresh loopback port (the test's own
// loopback stands in for the sandbox's) until the test ends.
func listenLoopback(t *testing.T, handle func(net.Conn)) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { defer c.Close(); handle(c) })
		}
	})
	t.Cleanup(func() { l.Close(); wg.Wait() })
	return l.Addr().(*net.TCPAddr).Port
}

// TestPortStreamsBothWaysWithHalfClose: bytes pass both ways unchanged, and
// the caller's end of stream reaches the server as one (it answers after
// reading everything).
func TestPortStreamsBothWaysWithHalfClose(t *testing.T) {
	e := newEnv(t)
	port := listenLoopback(t, func(c net.Conn) {
		data, _ := io.ReadAll(c)
		c.Write([]byte(strings.ToUpper(string(data))))
	})
	conn, err := e.c.DialPort(ctxT(t), port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msg := strings.Repeat("hello port ", 100000) // 1.1 MB: many reads each way
	go func() {
		io.WriteString(conn, msg)
		conn.(interface{ CloseWrite() error }).CloseWrite()
	}()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != strings.ToUpper(msg) {
		t.Fatalf("got %d bytes back, want %d, the same upper-cased", len(got), len(msg))
	}
}

// TestPortServerSpeaksFirst: a server that greets before it reads (SSH,
// SMTP) gets its greeting to the caller, even when it arrives with the
// upgrade's answer.
func TestPortServerSpeaksFirst(t *testing.T) {
	e := newEnv(t)
	port := listenLoopback(t, func(c net.Conn) {
		io.WriteString(c, "220 hello\n")
		line, _ := bufio.NewReader(c).ReadString('\n')
		io.WriteString(c, "echo "+line)
	})
	conn, err := e.c.DialPort(ctxT(t), port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(conn)
	if l, _ := br.ReadString('\n'); l != "220 hello\n" {
		t.Fatalf("greeting %q", l)
	}
	io.WriteString(conn, "ping\n")
	if l, _ := br.ReadString('\n'); l != "echo ping\n" {
		t.Fatalf("answer %q", l)
	}
}

func TestPortNothingListening(t *testing.T) {
	e := newEnv(t)
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	_, err = e.c.DialPort(ctxT(t), port)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "nothing listens on port") {
		t.Fatalf("DialPort to a closed port: %v, want unavailable, \"nothing listens on port\"", err)
	}
}

// TestPortRefusals: bad ports, a wrong token and a request that is no
// upgrade are refused in words, before anything is dialled.
func TestPortRefusals(t *testing.T) {
	e := newEnv(t)
	for _, p := range []int{0, -1, 65536, 70000} {
		if _, err := e.c.DialPort(ctxT(t), p); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("DialPort(%d): %v, want invalid argument", p, err)
		}
	}
	wrong, err := client.Dial(ctxT(t), e.sock, "wrong-token")
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	if _, err := wrong.DialPort(ctxT(t), 80); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("DialPort with a wrong token: %v, want unauthenticated", err)
	}
	hc := &http.Client{Transport: e.c.Transport("")}
	for path, want := range map[string]int{
		executor.PortPath + "0":     http.StatusBadRequest,
		executor.PortPath + "070":   http.StatusBadRequest,
		executor.PortPath + "65536": http.StatusBadRequest,
		executor.PortPath + "x":     http.StatusBadRequest,
		executor.PortPath + "80":    http.StatusBadRequest, // HTTP/2, no upgrade
	} {
		req, _ := http.NewRequest("GET", "http://executor"+path, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || len(body) == 0 {
			t.Errorf("GET %s: %d %q, want %d with a reason", path, resp.StatusCode, body, want)
		}
	}
}

// TestPortConnectionsEndWithTheExecutor: Close ends open port connections
// (no goroutine outlives the server: goleak in TestMain).
func TestPortConnectionsEndWithTheExecutor(t *testing.T) {
	e := newEnv(t)
	port := listenLoopback(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	conn, err := e.c.DialPort(ctxT(t), port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	e.srv.Close()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read after the executor closed: %v, want EOF", err)
	}
}
