package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/gateway"
	"github.com/reinsdev/reins/sandbox"
)

// benchGateway is the bench manager's gateway handler: /bytes?n=N sends N
// bytes, as the port server does, so the two paths differ only in the way
// there.
var benchGateway = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	n, _ := strconv.Atoi(r.URL.Query().Get("n"))
	w.Header().Set("Content-Length", strconv.Itoa(n))
	w.Write(make([]byte, n))
})

// gatewayTunnel: a program in a gVisor sandbox GETs 1 KiB from the
// service's gateway handler at gateway.Addr (the executor's loopback
// listener, its socket, the service's per-sandbox server) beside the same
// GETs from the same program to a server inside the same sandbox on its
// loopback: what carrying a connection out to the service costs over a
// local server. Kept-alive connection (what SDKs use) and a new connection
// each (one reverse accept each).
func (b *bench) gatewayTunnel(n int) error {
	bins := map[string]string{}
	for name, pkg := range map[string]string{"gwclient": "./bench/gwclient", "portserver": "./test/e2e/testdata/portserver"} {
		bins[name] = filepath.Join(b.dir, name)
		build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bins[name], pkg)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s: %v: %s", name, err, out)
		}
	}
	_, ex, remove, err := b.sandbox1(sandbox.Spec{Image: "busybox", Gateway: &sandbox.GatewaySpec{}})
	if err != nil {
		return err
	}
	defer remove()
	for _, bin := range bins {
		if _, err := ex.CopyTo(b.ctx, bin, "/workspace"); err != nil {
			return err
		}
	}
	if _, err := ex.Start(b.ctx, &executorv1.ExecRequest{Argv: []string{"/workspace/portserver", "-addr", "127.0.0.1:3000"}}); err != nil {
		return err
	}
	measure := func(n int) (map[string]int64, error) {
		out, errOut, exit, err := ex.Run(b.ctx, "/workspace/gwclient", "-n", strconv.Itoa(n),
			"-ours", "http://"+gateway.Addr+"/bytes?n=1024", "-base", "http://127.0.0.1:3000/bytes?n=1024")
		if err != nil || exit.GetExitCode() != 0 {
			return nil, fmt.Errorf("gwclient: %v, exit %v: %s", err, exit, errOut)
		}
		var r map[string]int64
		return r, json.Unmarshal(out, &r)
	}
	for deadline := time.Now().Add(10 * time.Second); ; { // the port server comes up
		_, err := measure(1)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	r, err := measure(n)
	if err != nil {
		return err
	}
	for _, mode := range []struct{ key, name string }{{"kept", "kept-alive connection"}, {"new", "new connection each"}} {
		po, pd := time.Duration(r[mode.key+"_ours"]), time.Duration(r[mode.key+"_base"])
		b.add(fmt.Sprintf("GET 1 KiB from the model gateway in a sandbox, %s (p50; %s added)", mode.name, ms(po-pd)), ms(po),
			ms(pd)+" a server in the same sandbox", ratio(po, pd), "")
	}
	return nil
}
