package netns

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"testing"
	"time"
)

// BenchmarkAttachDetach measures Attach+Detach of one sandbox link beside
// its floor, making and removing a bare bind-mounted network namespace,
// in the same run.
func BenchmarkAttachDetach(b *testing.B) {
	r := newRouter(b)
	var floor time.Duration
	for i := 0; i < b.N; i++ {
		p := r.nsPath("floor")
		t0 := time.Now()
		if err := newNS(p, func() error { return nil }); err != nil {
			b.Fatal(err)
		}
		if err := removeNS(p); err != nil {
			b.Fatal(err)
		}
		floor += time.Since(t0)
	}
	b.ResetTimer()
	t0 := time.Now()
	for i := 0; i < b.N; i++ {
		if _, err := r.Attach("bench"); err != nil {
			b.Fatal(err)
		}
		if err := r.Detach("bench"); err != nil {
			b.Fatal(err)
		}
	}
	ours := time.Since(t0)
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(ours)/1e6/n, "ms/attach-detach")
	b.ReportMetric(float64(floor)/1e6/n, "ms/bare-netns")
	b.ReportMetric(float64(ours)/float64(floor), "attach-detach/bare-netns")
}

// BenchmarkThroughput measures TCP throughput from a sandbox on each
// backend, through its veth, to a listener on the router's proxy port,
// for several MTUs (the sender is the probe, a Go program writing 64 KiB
// at a time, as in the floor); beside it, in the same run, the floor: a host-kernel
// client in the same sandbox namespace sending through the same veth.
//
//	go test -run XXX -bench Throughput -benchtime 3x ./egress/netns
func BenchmarkThroughput(b *testing.B) {
	const mib = 100
	for _, bk := range backends {
		for _, mtu := range []int{1500, 9000, 65520} {
			b.Run(fmt.Sprintf("%s/mtu=%d", bk.name, mtu), func(b *testing.B) {
				r := newRouter(b)
				r.cfg.MTU = mtu // links made from here on
				backend := bk.new(b, b.TempDir())
				rootfs := sandboxRootfs(b)
				l, err := r.Listen("tcp4", ":"+strconv.Itoa(testPorts.Proxy))
				if err != nil {
					b.Fatal(err)
				}
				got := make(chan float64, 1)
				serve(b, l, func() {
					for {
						c, err := l.Accept()
						if err != nil {
							return
						}
						t0 := time.Now()
						n, _ := io.Copy(io.Discard, c)
						c.Close()
						got <- float64(n) / (1 << 20) / time.Since(t0).Seconds()
					}
				})
				var ours, floor float64
				for i := 0; i < b.N; i++ {
					link, err := r.Attach(fmt.Sprintf("tp%d", i))
					if err != nil {
						b.Fatal(err)
					}
					dst := net.JoinHostPort(link.Gateway.String(), strconv.Itoa(testPorts.Proxy))
					inLink(b, link, func() error { return send(dst, mib<<20) })
					floor += <-got
					startScript(b, backend, rootfs, link.NetNS,
						fmt.Sprintf("probe send=%s/%d", dst, mib))
					ours += <-got
				}
				n := float64(b.N)
				b.ReportMetric(ours/n, "MiB/s")
				b.ReportMetric(floor/n, "MiB/s-host-kernel")
				b.ReportMetric(ours/floor, "sandbox/host-kernel")
			})
		}
	}
}

// send writes n zero bytes to addr over TCP.
func send(addr string, n int64) error {
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = io.CopyN(c, zeros{}, n)
	return err
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// BenchmarkAttach and BenchmarkDetach split BenchmarkAttachDetach.
func BenchmarkAttachOnly(b *testing.B) {
	r := newRouter(b)
	var att, det time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := r.Attach("bench"); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := r.Detach("bench"); err != nil {
			b.Fatal(err)
		}
		att += t1.Sub(t0)
		det += time.Since(t1)
	}
	b.ReportMetric(float64(att)/1e6/float64(b.N), "ms/attach")
	b.ReportMetric(float64(det)/1e6/float64(b.N), "ms/detach")
}
