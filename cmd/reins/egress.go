package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/reinsdev/reins/egress"
)

// parseResolve reads serve --egress-resolve NAME=IP flags.
func parseResolve(flags []string) (map[string][]netip.Addr, error) {
	out := map[string][]netip.Addr{}
	for _, f := range flags {
		name, ip, ok := strings.Cut(f, "=")
		name = egress.CanonicalName(strings.TrimSpace(name))
		a, err := netip.ParseAddr(strings.TrimSpace(ip))
		if !ok || err != nil || !egress.ValidName(name) {
			return nil, usageError{fmt.Errorf("--egress-resolve %q: want NAME=IP, such as mirror.internal=10.0.0.5", f)}
		}
		out[name] = append(out[name], a.Unmap())
	}
	return out, nil
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

// ownAddrs are the addresses the service's API answers on, which the
// proxy never dials: every address of this host when it listens on all.
func ownAddrs(a net.Addr) []netip.AddrPort {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return nil
	}
	if !ap.Addr().IsUnspecified() {
		return []netip.AddrPort{netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())}
	}
	out := []netip.AddrPort{netip.AddrPortFrom(netip.IPv4Unspecified(), ap.Port()), netip.AddrPortFrom(netip.IPv6Unspecified(), ap.Port())}
	addrs, _ := net.InterfaceAddrs()
	for _, ia := range addrs {
		if p, err := netip.ParsePrefix(ia.String()); err == nil {
			out = append(out, netip.AddrPortFrom(p.Addr().Unmap(), ap.Port()))
		}
	}
	return out
}
