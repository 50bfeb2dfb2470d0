package image

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/reinsdev/reins/errdefs"
)

// The service runs on the host's network as root: a pull a tenant names
// must not make it a proxy into the host or its private network (a
// registry on loopback, a cloud metadata address, an internal service
// reached by a redirect). Such pulls dial only public addresses.

type untrustedKey struct{}

// Untrusted marks ctx as a pull for a tenant: its registry connections,
// and those of every redirect, go only to public addresses, resolved here
// and dialled as resolved (no second lookup to rebind).
func Untrusted(ctx context.Context) context.Context {
	return context.WithValue(ctx, untrustedKey{}, true)
}

func isUntrusted(ctx context.Context) bool { v, _ := ctx.Value(untrustedKey{}).(bool); return v }

// ErrPrivateAddress is why a tenant's pull was refused a connection.
var ErrPrivateAddress = errors.New("the registry's address is not a public one")

// public reports whether a tenant's pull may connect to ip.
func public(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

// nonPublic are ranges netip's predicates leave out: "this network",
// carrier-grade NAT, IETF protocol assignments, benchmarking, reserved,
// and the IPv6 ones that embed IPv4 or are for documentation.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"), netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"), netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"), netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("2001:db8::/32"), netip.MustParsePrefix("2002::/16"),
}

// publicDial resolves addr's host and dials the first public address; any
// non-public one refuses the whole name, so a name cannot mix a public
// address with a private one and be dialled at the second.
func publicDial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else {
		found, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			// Not the resolver's own error: it names the host's DNS server.
			return nil, errdefs.WithMessage(errdefs.ErrUnavailable, fmt.Sprintf("the registry host %s cannot be resolved", host))
		}
		ips = found
	}
	for _, ip := range ips {
		if !public(ip) {
			return nil, fmt.Errorf("%s: %w", host, ErrPrivateAddress)
		}
	}
	if len(ips) == 0 {
		return nil, errdefs.WithMessage(errdefs.ErrUnavailable, fmt.Sprintf("the registry host %s has no address", host))
	}
	var d net.Dialer
	return d.DialContext(ctx, network, net.JoinHostPort(ips[0].String(), port))
}

// untrustedTransport is the transport of tenants' pulls: its own pool (a
// connection the operator's pull made to a private registry is never
// reused), public addresses only, HTTPS only.
func (s *Store) untrustedTransport() http.RoundTripper {
	base := remote.DefaultTransport.(*http.Transport).Clone()
	base.DialContext = publicDial
	base.Proxy = nil
	return &httpGuard{base: base, allowed: func(string) bool { return false }}
}
