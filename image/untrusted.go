package image

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/reinsdev/reins/egress"
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

// public reports whether a tenant's pull may connect to ip: not in any
// of the ranges egress.Reserved names (loopback, private, link-local and
// cloud metadata, and the rest of IANA's special-purpose ranges), the
// same list the egress proxy refuses.
func public(ip netip.Addr) bool {
	_, reserved := egress.Reserved(ip)
	return ip.IsValid() && !reserved
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
