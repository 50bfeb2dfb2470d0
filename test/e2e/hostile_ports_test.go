package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// The hostile parts of TestPorts (ports_test.go), which runs them on its
// sandboxes: hosts that try to pass for a port host, and more connections
// than a sandbox may hold.

// portConnsPerSandbox is server.PortConnsPerSandbox, the bound checked
// from the outside.
const portConnsPerSandbox = 128

// checkPortHostileHosts: hosts that are not exactly PORT-ID.localhost
// never reach the sandbox.
func checkPortHostileHosts(t *testing.T, s *service, owner *http.Client, sb, svcPort string) {
	for _, host := range []string{
		"3000-" + sb + ".localhost.evil.com", "0-" + sb + ".localhost", "70000-" + sb + ".localhost",
		"03000-" + sb + ".localhost", "3000-../x.localhost", "3000-" + sb + "x.localhost", "3000-" + sb + ".a.localhost",
		"3000-" + sb + "%2e.localhost", "-" + sb + ".localhost",
	} {
		code, body, _ := get(t, owner, "http://"+s.addr+"/index.txt", "Host", host+":"+svcPort)
		if code == 200 || strings.Contains(body, "hello from the sandbox") {
			t.Errorf("Host %q reached the sandbox: %d %q", host, code, body)
		}
	}
}

// checkPortBound: at most portConnsPerSandbox requests are in flight
// through one sandbox's ports; the next is refused at once with 503, and
// one ending makes room.
func checkPortBound(t *testing.T, s *service, owner *http.Client, url3001 string) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	held := make(chan error, portConnsPerSandbox)
	var first context.CancelFunc
	for i := range portConnsPerSandbox {
		rctx, rcancel := context.WithCancel(ctx)
		if i == 0 {
			first = rcancel
		} else {
			defer rcancel()
		}
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(rctx, "GET", url3001+"hold", nil)
			resp, err := owner.Do(req)
			if err != nil {
				held <- err
				return
			}
			defer resp.Body.Close()
			line := make([]byte, 5)
			_, err = io.ReadFull(resp.Body, line)
			if err == nil && (resp.StatusCode != 200 || string(line) != "held\n") {
				err = fmt.Errorf("%d %q", resp.StatusCode, line)
			}
			held <- err
			io.Copy(io.Discard, resp.Body)
		})
	}
	for range portConnsPerSandbox {
		if err := <-held; err != nil {
			t.Fatalf("one of %d held requests: %v", portConnsPerSandbox, err)
		}
	}
	start := time.Now()
	code, body, _ := get(t, owner, url3001+"headers")
	if code != 503 || !strings.Contains(body, fmt.Sprint(portConnsPerSandbox)) || time.Since(start) > 5*time.Second {
		t.Errorf("request %d: %d %q after %s, want 503 at once naming the bound", portConnsPerSandbox+1, code, body, time.Since(start))
	}
	first()
	eventually(t, 10*time.Second, "a request once one held ended", func() (bool, string) {
		code, body, _ := get(t, owner, url3001+"headers")
		return code == 200, fmt.Sprint(code, " ", body)
	})
}
