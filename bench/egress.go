package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"runtime"
	"strconv"
	"time"

	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/egress/proxy"
)

// egressBench measures the egress proxy on loopback (no sandbox: a
// client bound to 127.0.0.2 stands for one), each figure beside the same
// request made directly from the host in the same run, interleaved.
type egressBench struct {
	p       *proxy.Proxy
	proxied *http.Client // through the explicit proxy, from the sandbox's address
	direct  *http.Client
	plain   *httptest.Server
	tlsSrv  *httptest.Server
	secret  proxy.Secret
	done    func()
}

var egressSandbox = netip.MustParseAddr("127.0.0.2")

func (b *bench) egress(n, mib int) error {
	eb, err := newEgressBench(mib)
	if err != nil {
		return err
	}
	defer eb.done()
	port := func(s *httptest.Server) string {
		return s.Listener.Addr().(*net.TCPAddr).AddrPort().String()[len("127.0.0.1:"):]
	}

	// Plain HTTP GET, kept-alive connections on both sides.
	ours, base, err := eb.interleave(n, func(c *http.Client, direct bool) (*http.Request, error) {
		host := "mirror.test"
		if direct {
			host = "127.0.0.1"
		}
		return http.NewRequest("GET", "http://"+host+":"+port(eb.plain)+"/small", nil)
	})
	if err != nil {
		return err
	}
	b.add("HTTP GET through the egress proxy (p50)", us(pct(ours, 50)), us(pct(base, 50))+" direct from the host", ratio(pct(ours, 50), pct(base, 50)),
		fmt.Sprintf("≤ 1.2 ms added (%s)", us(pct(ours, 50)-pct(base, 50))))
	b.add("HTTP GET through the egress proxy (p99)", us(pct(ours, 99)), us(pct(base, 99))+" direct from the host", ratio(pct(ours, 99), pct(base, 99)), "")

	// HTTPS with a secret put in (the proxy terminates TLS and makes its
	// own TLS upstream) beside direct HTTPS, both kept alive.
	ours, base, err = eb.interleave(n, func(c *http.Client, direct bool) (*http.Request, error) {
		req, err := http.NewRequest("GET", "https://example.com:"+port(eb.tlsSrv)+"/small", nil)
		if err != nil {
			return nil, err
		}
		tok := eb.secret.Placeholder
		if direct {
			tok = string(eb.secret.Value)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		return req, nil
	})
	if err != nil {
		return err
	}
	b.add("HTTPS GET with a secret injected (terminated; p50)", us(pct(ours, 50)), us(pct(base, 50))+" direct HTTPS from the host", ratio(pct(ours, 50), pct(base, 50)),
		fmt.Sprintf("≤ 1.2 ms added (%s)", us(pct(ours, 50)-pct(base, 50))))
	b.add("HTTPS GET with a secret injected (terminated; p99)", us(pct(ours, 99)), us(pct(base, 99))+" direct HTTPS from the host", ratio(pct(ours, 99), pct(base, 99)), "")

	// A large download, three rounds each, best of each.
	var bestOurs, bestBase time.Duration
	for i := 0; i < 3; i++ {
		for _, direct := range []bool{false, true} {
			host, c := "mirror.test", eb.proxied
			if direct {
				host, c = "127.0.0.1", eb.direct
			}
			t0 := time.Now()
			if err := download(c, "http://"+host+":"+port(eb.plain)+"/big", int64(mib)<<20); err != nil {
				return err
			}
			d := time.Since(t0)
			if direct && (bestBase == 0 || d < bestBase) {
				bestBase = d
			} else if !direct && (bestOurs == 0 || d < bestOurs) {
				bestOurs = d
			}
		}
	}
	rate := func(d time.Duration) float64 { return float64(mib) / d.Seconds() }
	b.add(fmt.Sprintf("download %d MiB over HTTP through the egress proxy (MiB/s)", mib), fmt.Sprintf("%.0f", rate(bestOurs)),
		fmt.Sprintf("%.0f direct from the host", rate(bestBase)), rate(bestOurs)/rate(bestBase), "≥ 0.8×")

	return b.egressHeap(eb.p)
}

// egressHeap is the heap 50 idle sandboxes (each with its CA and a
// secret) add to the proxy, beside the whole heap before them.
func (b *bench) egressHeap(p *proxy.Proxy) error {
	const n = 50
	before := heap()
	for i := 0; i < n; i++ {
		ca, err := proxy.NewCA(fmt.Sprintf("idle%d", i))
		if err != nil {
			return err
		}
		rules, _ := egress.Rules{AllowHosts: []egress.HostRule{{Host: "example.com"}}}.Normalize(false)
		addr := netip.AddrFrom4([4]byte{127, 1, byte(i / 250), byte(1 + i%250)})
		if err := p.Add(proxy.Sandbox{ID: fmt.Sprintf("idle%d", i), Addr: addr, Rules: rules, CA: ca,
			Secrets: []proxy.Secret{{Name: "T", Placeholder: proxy.NewPlaceholder(), Value: []byte("v"), Hosts: []string{"example.com"}}}}); err != nil {
			return err
		}
	}
	after := heap()
	added := float64(after-before) / 1024
	b.add(fmt.Sprintf("egress proxy heap of %d idle sandboxes with CAs and a secret (KiB)", n), fmt.Sprintf("%.0f (%.1f each)", added, added/n),
		fmt.Sprintf("%.0f the whole bench process's heap before them", float64(before)/1024), added*1024/float64(before), "")
	for i := 0; i < n; i++ {
		p.Remove(fmt.Sprintf("idle%d", i))
	}
	return nil
}

func heap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func newEgressBench(mib int) (*egressBench, error) {
	big := make([]byte, 1<<20)
	h := http.NewServeMux()
	h.HandleFunc("/small", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	h.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(mib<<20))
		for i := 0; i < mib; i++ {
			if _, err := w.Write(big); err != nil {
				return
			}
		}
	})
	eb := &egressBench{plain: httptest.NewServer(h), tlsSrv: httptest.NewTLSServer(h)}
	ca, err := proxy.NewCA("bench")
	if err != nil {
		return nil, err
	}
	upRoots := x509.NewCertPool()
	upRoots.AddCert(eb.tlsSrv.Certificate())
	lo := netip.MustParseAddr("127.0.0.1")
	eb.p = proxy.New(proxy.Config{
		Overrides:     map[string][]netip.Addr{"mirror.test": {lo}, "example.com": {lo}},
		UpstreamRoots: upRoots,
		Log:           func(egress.Entry) {},
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	served := make(chan struct{})
	go func() { eb.p.ServeHTTP(l); close(served) }()
	eb.secret = proxy.Secret{Name: "TOKEN", Placeholder: proxy.NewPlaceholder(), Value: []byte("the-real-token"), Hosts: []string{"example.com"}}
	rules, _ := egress.Rules{AllowHosts: []egress.HostRule{{Host: "mirror.test"}, {Host: "example.com"}}}.Normalize(true)
	if err := eb.p.Add(proxy.Sandbox{ID: "bench", Addr: egressSandbox, Rules: rules, Secrets: []proxy.Secret{eb.secret}, CA: ca}); err != nil {
		return nil, err
	}
	sbRoots := x509.NewCertPool()
	sbRoots.AppendCertsFromPEM(ca.CertPEM())
	pu, _ := url.Parse("http://" + l.Addr().String())
	from := &net.Dialer{LocalAddr: &net.TCPAddr{IP: egressSandbox.AsSlice()}}
	ptr := &http.Transport{Proxy: http.ProxyURL(pu), DialContext: from.DialContext, TLSClientConfig: &tls.Config{RootCAs: sbRoots}, DisableCompression: true}
	// Directly, example.com is the TLS server on loopback.
	dtr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: upRoots, ServerName: "example.com"}, DisableCompression: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if h, p, _ := net.SplitHostPort(addr); h == "example.com" {
				addr = net.JoinHostPort("127.0.0.1", p)
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}
	eb.proxied, eb.direct = &http.Client{Transport: ptr}, &http.Client{Transport: dtr}
	eb.done = func() {
		ptr.CloseIdleConnections()
		dtr.CloseIdleConnections()
		eb.p.Close()
		<-served
		eb.plain.Close()
		eb.tlsSrv.Close()
	}
	return eb, nil
}

// interleave makes n requests each way, alternating, after a warm-up,
// and returns the latencies through the proxy and direct.
func (eb *egressBench) interleave(n int, mk func(c *http.Client, direct bool) (*http.Request, error)) (ours, base []time.Duration, err error) {
	for i := -20; i < n; i++ {
		for _, direct := range []bool{false, true} {
			c := eb.proxied
			if direct {
				c = eb.direct
			}
			req, err := mk(c, direct)
			if err != nil {
				return nil, nil, err
			}
			t0 := time.Now()
			resp, err := c.Do(req)
			if err != nil {
				return nil, nil, err
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			d := time.Since(t0)
			if resp.StatusCode != 200 {
				return nil, nil, fmt.Errorf("%s %s: status %d", req.Method, req.URL, resp.StatusCode)
			}
			if i < 0 {
				continue
			}
			if direct {
				base = append(base, d)
			} else {
				ours = append(ours, d)
			}
		}
	}
	return ours, base, nil
}

func download(c *http.Client, u string, want int64) error {
	resp, err := c.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil && n != want {
		err = fmt.Errorf("%s: %d bytes, want %d", u, n, want)
	}
	return err
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/1e3) }
