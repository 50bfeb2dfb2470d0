package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/reinsdev/reins/egress"
)

// parseResolve reads serve --egress-resolve NAME=IP[:PORT] flags: the
// addresses of each name, and the ports each is trusted on (none: every
// port).
func parseResolve(flags []string) (map[string][]netip.Addr, map[string][]int, error) {
	out, ports := map[string][]netip.Addr{}, map[string][]int{}
	anyPort := map[string]bool{}
	for _, f := range flags {
		name, rest, ok := strings.Cut(f, "=")
		name = egress.CanonicalName(strings.TrimSpace(name))
		rest = strings.TrimSpace(rest)
		a, err := netip.ParseAddr(strings.Trim(rest, "[]"))
		port := 0
		if err != nil {
			if ap, perr := netip.ParseAddrPort(rest); perr == nil && ap.Port() != 0 {
				a, port, err = ap.Addr(), int(ap.Port()), nil
			}
		}
		if !ok || err != nil || !egress.ValidName(name) {
			return nil, nil, usageError{fmt.Errorf("--egress-resolve %q: want NAME=IP or NAME=IP:PORT, such as mirror.internal=10.0.0.5:443", f)}
		}
		out[name] = append(out[name], a.Unmap())
		if port == 0 {
			anyPort[name] = true
		} else {
			ports[name] = append(ports[name], port)
		}
	}
	for name := range anyPort {
		delete(ports, name)
	}
	return out, ports, nil
}

// resolverAt is a resolver that asks the DNS server at addr, or nil for
// this host's own.
func resolverAt(addr string) *net.Resolver {
	if addr == "" {
		return nil
	}
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
}

// ownAddrs is the address the service's API answers on, which the proxy
// never dials (on every address of this host when it listens on all).
func ownAddrs(a net.Addr) []netip.AddrPort {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return nil
	}
	return []netip.AddrPort{ap}
}
