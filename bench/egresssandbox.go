package main

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/egress/boundary"
	"github.com/reinsdev/reins/image"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/manager"
	"github.com/reinsdev/reins/sandbox/runc"
)

// egressSandbox: a download from inside a real sandbox (runc, then
// gVisor) through the whole boundary — the sandbox's veth, the router
// namespace's firewall, the egress proxy, out from the service's
// namespace — beside the same busybox wget of the same file run on the
// host straight to the server, interleaved round by round. Both with the
// proxy variable (the explicit proxy) and without (the firewall's
// redirect to the transparent listener). The sandbox's figure includes
// one exec (a few ms), so the file is large (10× -mib) for it to matter
// little.
func (b *bench) egressSandbox(mib, rounds int) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	chunk := make([]byte, 1<<20)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(mib<<20))
		for i := 0; i < mib; i++ {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})}
	go srv.Serve(ln)
	defer srv.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	bnd, err := boundary.New(boundary.Config{Dir: filepath.Join(b.dir, "net"),
		Overrides: map[string][]netip.Addr{"big.test": {netip.MustParseAddr("127.0.0.1")}},
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	defer bnd.Close()
	rc, err := runc.New(filepath.Join(b.dir, "rt-runc"))
	if err != nil {
		return err
	}
	m, err := manager.New(manager.Config{
		Dir: filepath.Join(b.dir, "sb-net"), ExecutorPath: b.executor,
		Backends: map[string]sandbox.Backend{"gvisor": b.gv, "runc": rc}, DefaultBackend: "gvisor",
		Images: manager.ImageStore(b.images), CheckInterval: time.Hour, DiskPool: -1, Network: bnd,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	defer m.Close()
	rules, _ := egress.Rules{AllowHosts: []egress.HostRule{{Host: "big.test"}}}.Normalize(true)
	busybox := image.DefaultBusybox()
	host := func() (time.Duration, error) {
		t0 := time.Now()
		out, err := exec.Command(busybox, "wget", "-q", "-O", "/dev/null", "http://127.0.0.1:"+port+"/").CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("wget on the host: %v: %s", err, out)
		}
		return time.Since(t0), nil
	}
	for _, backend := range []string{"runc", "gvisor"} {
		rec, err := m.Create(b.ctx, "", sandbox.Spec{Image: "busybox", Backend: backend, Network: rules}, nil)
		if err != nil {
			return err
		}
		ex, err := m.Client(b.ctx, "", rec.ID)
		if err != nil {
			m.Delete(b.ctx, "", rec.ID)
			return err
		}
		for _, mode := range []struct{ name, script string }{
			{"explicit proxy", `http_proxy=$HTTP_PROXY wget -q -O /dev/null http://big.test:` + port + `/`},
			{"redirected", `wget -q -O /dev/null http://big.test:` + port + `/`},
		} {
			var ours, base time.Duration
			for i := 0; i < rounds; i++ {
				t0 := time.Now()
				_, stderr, exit, err := ex.Run(b.ctx, "sh", "-c", mode.script)
				d := time.Since(t0)
				if err != nil || exit.GetExitCode() != 0 {
					m.Delete(b.ctx, "", rec.ID)
					return fmt.Errorf("wget in the %s sandbox: exit %d, %v: %s", backend, exit.GetExitCode(), err, stderr)
				}
				h, err := host()
				if err != nil {
					m.Delete(b.ctx, "", rec.ID)
					return err
				}
				if ours == 0 || d < ours {
					ours = d
				}
				if base == 0 || h < base {
					base = h
				}
			}
			rate := func(d time.Duration) float64 { return float64(mib) / d.Seconds() }
			b.add(fmt.Sprintf("download %d MiB from a %s sandbox through the boundary, %s (MiB/s)", mib, backend, mode.name),
				fmt.Sprintf("%.0f", rate(ours)), fmt.Sprintf("%.0f the same busybox wget on the host, direct", rate(base)),
				rate(ours)/rate(base), "≥ 0.8×")
		}
		m.Delete(b.ctx, "", rec.ID)
	}
	return nil
}
