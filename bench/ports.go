package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/server"
)

// ports: HTTP GETs through a sandbox's port URL (reins serve's proxy, the
// executor's socket, gVisor's netstack, the server in the sandbox) beside
// the same GETs from the same client to the same server program on the
// host's loopback: what reaching a port through the service costs over
// reaching a local server. Small GETs on a kept-alive connection, GETs on
// a new connection each (a new executor connection for ours), and one
// large download.
func (b *bench) ports(n, mib int) error {
	bin := filepath.Join(b.dir, "portserver")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./test/e2e/testdata/portserver")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building the port server: %v: %s", err, out)
	}
	rec, ex, remove, err := b.busybox1()
	if err != nil {
		return err
	}
	defer remove()
	if _, err := ex.CopyTo(b.ctx, bin, "/workspace"); err != nil {
		return err
	}
	if _, err := ex.Start(b.ctx, &executorv1.ExecRequest{Argv: []string{"/workspace/portserver", "-addr", "127.0.0.1:3000"}}); err != nil {
		return err
	}
	host, err := freePort()
	if err != nil {
		return err
	}
	local := exec.Command(bin, "-addr", host)
	if err := local.Start(); err != nil {
		return err
	}
	defer func() { local.Process.Kill(); local.Wait() }()

	srv := httptest.NewServer(server.New(server.Over(b.m), "t", nil).
		WithPorts(&server.Ports{Domain: "localhost", Key: make([]byte, 32)}).Handler())
	defer srv.Close()
	svc := strings.TrimPrefix(srv.URL, "http://")
	ours := "http://3000-" + rec.ID + ".localhost/"
	direct := "http://" + host + "/"
	client := func(addr string, keepAlive bool) *http.Client {
		return &http.Client{Transport: &http.Transport{
			DisableKeepAlives: !keepAlive, DisableCompression: true,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", addr)
			},
		}}
	}
	get := func(c *http.Client, url string) (int64, error) {
		req, _ := http.NewRequestWithContext(b.ctx, "GET", url, nil)
		req.Header.Set("Authorization", "Bearer t")
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		got, err := io.Copy(io.Discard, resp.Body)
		if err == nil && resp.StatusCode != 200 {
			err = fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return got, err
	}
	// The servers come up.
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, e1 := get(client(svc, false), ours+"bytes?n=1")
		_, e2 := get(client(host, false), direct+"bytes?n=1")
		if e1 == nil && e2 == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the port servers did not come up: %v; %v", e1, e2)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, mode := range []struct {
		name      string
		keepAlive bool
	}{{"kept-alive connection", true}, {"new connection each", false}} {
		oc, dc := client(svc, mode.keepAlive), client(host, mode.keepAlive)
		var o, d []time.Duration
		for range n { // interleaved: the machine's load falls on both alike
			t0 := time.Now()
			if _, err := get(oc, ours+"bytes?n=1024"); err != nil {
				return err
			}
			o = append(o, time.Since(t0))
			t0 = time.Now()
			if _, err := get(dc, direct+"bytes?n=1024"); err != nil {
				return err
			}
			d = append(d, time.Since(t0))
		}
		po, pd := pct(o, 50), pct(d, 50)
		b.add(fmt.Sprintf("GET 1 KiB through a port URL, %s (p50; %s added)", mode.name, ms(po-pd)), ms(po),
			ms(pd)+" the same server on the host's loopback", ratio(po, pd), "")
	}
	size := int64(mib) << 20
	rate := func(c *http.Client, url string) (float64, error) {
		t0 := time.Now()
		got, err := get(c, url+"bytes?n="+strconv.FormatInt(size, 10))
		if err == nil && got != size {
			err = fmt.Errorf("got %d bytes of %d", got, size)
		}
		return float64(mib) / time.Since(t0).Seconds(), err
	}
	ro, err := rate(client(svc, true), ours)
	if err != nil {
		return err
	}
	rd, err := rate(client(host, true), direct)
	if err != nil {
		return err
	}
	// Where the cost lies: the executor's connection alone, without the
	// service's proxy in front.
	bare := &http.Client{Transport: &http.Transport{DisableCompression: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return ex.DialPort(ctx, 3000) }}}
	rx, err := rate(bare, "http://sandbox/")
	if err != nil {
		return err
	}
	b.add(fmt.Sprintf("download %d MiB through a port URL (MiB/s)", mib), fmt.Sprintf("%.0f", ro),
		fmt.Sprintf("%.0f the same server on the host's loopback", rd), ro/rd, "")
	b.add(fmt.Sprintf("download %d MiB through the executor's port connection alone, no service proxy (MiB/s)", mib), fmt.Sprintf("%.0f", rx),
		fmt.Sprintf("%.0f the same server on the host's loopback", rd), rx/rd, "")
	return nil
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
