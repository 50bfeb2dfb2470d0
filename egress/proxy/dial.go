package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/reinsdev/reins/egress"
)

// target is where a connection or request asks to go: a name (canonical)
// or, with name "", a bare address.
type target struct {
	name string
	addr netip.Addr
	port int
}

func (t target) host() string {
	if t.name != "" {
		return t.name
	}
	return t.addr.String()
}

func (t target) String() string { return net.JoinHostPort(t.host(), strconv.Itoa(t.port)) }

// errHost is a Host, SNI or CONNECT target the proxy cannot read.
var errHost = errors.New("not a host name or address")

// parseTarget reads HOST[:PORT] (a Host header, a URL's host, a CONNECT
// authority, an SNI); defPort is used when it has no port, and port > 0
// overrides what it says (the connection's real port). A name written as
// an address in any form is the address.
func parseTarget(hostport string, defPort int) (target, error) {
	host, portStr := hostport, ""
	if h, pt, err := net.SplitHostPort(hostport); err == nil {
		host, portStr = h, pt
	} else if strings.HasPrefix(hostport, "[") && strings.HasSuffix(hostport, "]") {
		host = hostport[1 : len(hostport)-1]
	}
	t := target{port: defPort}
	if portStr != "" {
		n, err := strconv.Atoi(portStr)
		if err != nil || n < 1 || n > 65535 {
			return t, fmt.Errorf("port %q: %w", clip(portStr), errHost)
		}
		t.port = n
	}
	if t.port < 1 || t.port > 65535 {
		return t, fmt.Errorf("%q has no port: %w", clip(hostport), errHost)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return t, fmt.Errorf("%q: an address with a zone: %w", clip(host), errHost)
		}
		t.addr = a.Unmap()
		return t, nil
	}
	name := egress.CanonicalName(host)
	if a, ok := legacyIPv4(name); ok {
		t.addr = a
		return t, nil
	}
	if !egress.ValidName(name) || numericTLD(name) {
		return t, fmt.Errorf("%q: %w", clip(host), errHost)
	}
	t.name = name
	return t, nil
}

// numericTLD reports whether name's last label is a number: no host
// name is, and some tools would take it for an address.
func numericTLD(name string) bool {
	last := name[strings.LastIndexByte(name, '.')+1:]
	if hex, ok := strings.CutPrefix(last, "0x"); ok {
		return strings.Trim(hex, "0123456789abcdef") == ""
	}
	return strings.Trim(last, "0123456789") == ""
}

// legacyIPv4 reads the forms inet_aton accepts besides dotted quads
// (2130706433, 0x7f000001, 0177.1, 127.1): resolvers and tools that
// treat such a name as an address must not see it as a name we allowed.
func legacyIPv4(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		base := 10
		switch {
		case strings.HasPrefix(p, "0x"):
			base, p = 16, p[2:]
		case len(p) > 1 && p[0] == '0':
			base, p = 8, p[1:]
		}
		v, err := strconv.ParseUint(p, base, 32)
		if err != nil || p == "" {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	var n uint64
	last := len(vals) - 1
	for i, v := range vals[:last] {
		if v > 255 {
			return netip.Addr{}, false
		}
		n |= v << (24 - 8*i)
	}
	if vals[last] >= 1<<(32-8*last) {
		return netip.Addr{}, false
	}
	n |= vals[last]
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}

// decision is what the proxy decided on a target, and where it may go.
type decision struct {
	egress.Verdict
	addrs   []netip.Addr // allowed, in the order to try
	trusted bool         // from Overrides
}

// decide applies the rules to t: the name first (never resolved if it is
// not allowed), then each address it resolves to. prefer, if among them,
// is tried first (the address a redirected connection was going to).
func (p *Proxy) decide(ctx context.Context, rules egress.Rules, t target, prefer netip.Addr) decision {
	if t.name == "" {
		v := rules.DecideAddr(t.addr, false, false)
		if v.Allow && p.forbidden(netip.AddrPortFrom(t.addr, uint16(t.port))) {
			v = egress.Verdict{Rule: "the service's own listener"}
		}
		d := decision{Verdict: v}
		if v.Allow {
			d.addrs = []netip.Addr{t.addr}
		}
		return d
	}
	v := rules.DecideName(t.name, t.port)
	if !v.Allow {
		return decision{Verdict: v}
	}
	addrs, trusted, err := p.resolve(ctx, t.name)
	if err != nil {
		return decision{Verdict: egress.Verdict{Rule: "cannot resolve " + t.name + ": " + dnsReason(err)}}
	}
	// An operator's name trusted on some ports only: not on the others
	// (port 0 is a DNS answer; the connection is decided on its port).
	p.mu.Lock()
	ports := p.cfg.OverridePorts[t.name]
	p.mu.Unlock()
	if trusted && len(ports) > 0 && t.port != 0 && !slices.Contains(ports, t.port) {
		trusted = false
	}
	d := decision{Verdict: v, trusted: trusted}
	refusal := ""
	for _, a := range addrs {
		av := rules.DecideAddr(a, true, trusted)
		if av.Allow && p.forbidden(netip.AddrPortFrom(a.Unmap(), uint16(t.port))) {
			av = egress.Verdict{Rule: "the service's own listener"}
		}
		if !av.Allow {
			if refusal == "" {
				refusal = av.Rule
			}
			continue
		}
		if a.Unmap() == prefer {
			d.addrs = append([]netip.Addr{a.Unmap()}, d.addrs...)
		} else {
			d.addrs = append(d.addrs, a.Unmap())
		}
	}
	if len(d.addrs) == 0 {
		if refusal == "" {
			refusal = "no address"
		}
		d.Verdict = egress.Verdict{Rule: t.name + " resolves to " + refusal}
	}
	return d
}

func dnsReason(err error) string {
	var de *net.DNSError
	if errors.As(err, &de) {
		if de.IsNotFound {
			return "no such host"
		}
		if de.IsTimeout {
			return "timed out"
		}
		return de.Err
	}
	return "lookup failed"
}

func (p *Proxy) resolve(ctx context.Context, name string) ([]netip.Addr, bool, error) {
	p.mu.Lock()
	a, ok := p.cfg.Overrides[name]
	p.mu.Unlock()
	if ok {
		return a, true, nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.HandshakeTimeout)
	defer cancel()
	a, err := p.cfg.Resolver.LookupNetIP(ctx, "ip", name)
	return a, false, err
}

// forbidden reports whether ap is the service's own (Config.Forbidden or
// one of the proxy's listeners).
func (p *Proxy) forbidden(ap netip.AddrPort) bool {
	p.mu.Lock()
	own := p.own
	p.mu.Unlock()
	for _, list := range [][]netip.AddrPort{p.cfg.Forbidden, own} {
		for _, f := range list {
			if f.Port() != ap.Port() {
				continue
			}
			if f.Addr() == ap.Addr().Unmap() {
				return true
			}
		}
	}
	return false
}

// dial connects to the first of d's addresses that answers.
func (p *Proxy) dial(ctx context.Context, d decision, port int) (net.Conn, netip.AddrPort, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.HandshakeTimeout)
	defer cancel()
	var first error
	for _, a := range d.addrs {
		ap := netip.AddrPortFrom(a, uint16(port))
		c, err := p.cfg.Dial(ctx, "tcp", ap.String())
		if err == nil {
			return c, ap, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	if first == nil {
		first = errors.New("no address to connect to")
	}
	return nil, netip.AddrPort{}, first
}

func clip(s string) string {
	if len(s) <= 80 {
		return s
	}
	return s[:80] + "…"
}
