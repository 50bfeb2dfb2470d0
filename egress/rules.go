package egress

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/reinsdev/reins/errdefs"
)

// Bounds on what rules may carry: they are the user's to fill, and every
// connection is checked against them.
const (
	MaxHostRules   = 256 // allow and deny, each
	MaxCIDRs       = 64
	MaxSecretRefs  = 32
	MaxSecretHosts = 16 // per secret
)

// ParseMode reads a mode's name; "" is egress.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", ModeEgress:
		return ModeEgress, nil
	case ModeNone, ModeOpen:
		return Mode(s), nil
	}
	return "", fmt.Errorf("network mode %q: want none, egress or open: %w", clip(s), errdefs.ErrInvalidArgument)
}

// ParseHostRule reads HOST or HOST:PORT, where HOST is a DNS name or
// *.domain. An IP address is refused: bare addresses are allowed by
// prefix (--allow-cidr).
func ParseHostRule(s string) (HostRule, error) {
	orig := s
	bad := func(why string) (HostRule, error) {
		return HostRule{}, fmt.Errorf("host %q: %s: %w", clip(orig), why, errdefs.ErrInvalidArgument)
	}
	s = strings.ToLower(strings.TrimSpace(s))
	var r HostRule
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return bad("the port must be a number from 1 to 65535")
		}
		s, r.Port = h, n
	} else if strings.Count(s, ":") == 1 {
		return bad("the port must be a number from 1 to 65535")
	}
	s = strings.TrimSuffix(s, ".")
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return bad("an address is not a host name; allow it with --allow-cidr " + a.Unmap().String() + "/" + strconv.Itoa(a.Unmap().BitLen()))
	}
	name, wild := strings.CutPrefix(s, "*.")
	if !ValidName(name) {
		return bad("want a DNS name (letters, digits, '-', dots) or *.domain, with an optional :port")
	}
	if wild && !strings.Contains(name, ".") {
		return bad("a wildcard must be under a domain with a dot, such as *.example.com")
	}
	r.Host = s
	return r, nil
}

// String is the rule as a user writes it.
func (r HostRule) String() string {
	if r.Port != 0 {
		return r.Host + ":" + strconv.Itoa(r.Port)
	}
	return r.Host
}

// Matches reports whether r covers name (lower case, no trailing dot) on
// port.
func (r HostRule) Matches(name string, port int) bool {
	if r.Port != 0 && r.Port != port {
		return false
	}
	return MatchName(r.Host, name)
}

// MatchName reports whether pattern (a name or *.domain) covers name.
func MatchName(pattern, name string) bool {
	if rest, ok := strings.CutPrefix(pattern, "*."); ok {
		return strings.HasSuffix(name, "."+rest)
	}
	return name == pattern
}

// ValidName reports whether s is a DNS name: labels of letters, digits,
// '-' and '_', 1 to 63 bytes each, at most 253 in all.
func ValidName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, c := range []byte(l) {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// CanonicalName is name as rules compare it: lower case, without a
// trailing dot.
func CanonicalName(name string) string {
	return strings.TrimSuffix(strings.ToLower(name), ".")
}

// ParseCIDR reads a prefix ("10.1.0.0/16", "2001:db8::/32") or a single
// address (as its /32 or /128).
func ParseCIDR(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	return netip.Prefix{}, fmt.Errorf("cidr %q: want an address prefix such as 203.0.113.0/24 or 2001:db8::/32: %w", clip(s), errdefs.ErrInvalidArgument)
}

// ParseSecretRef reads NAME=HOST[,HOST...].
func ParseSecretRef(s string) (SecretRef, error) {
	name, hosts, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(hosts) == "" {
		return SecretRef{}, fmt.Errorf("secret %q: want NAME=HOST[,HOST...], the hosts the secret may be sent to: %w", clip(name), errdefs.ErrInvalidArgument)
	}
	r := SecretRef{Name: strings.TrimSpace(name)}
	for _, h := range strings.Split(hosts, ",") {
		r.Hosts = append(r.Hosts, strings.TrimSpace(h))
	}
	return r, nil
}

// ValidSecretName reports whether s can name a secret: it is an
// environment variable's name in the sandbox (letters, digits and '_',
// not starting with a digit, at most 128 bytes).
func ValidSecretName(s string) bool {
	if s == "" || len(s) > 128 || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Normalize checks r and returns it in canonical form (mode set, hosts
// in lower case, rules sorted and without duplicates). admin says whether
// the rules are the admin's: a tenant may not allow a prefix that covers
// a reserved range (the host's loopback, private networks, cloud
// metadata), since that would reach the service's own side.
func (r Rules) Normalize(admin bool) (Rules, error) {
	m, err := ParseMode(string(r.Mode))
	if err != nil {
		return r, err
	}
	out := Rules{Mode: m}
	for _, list := range []struct {
		in   []HostRule
		out  *[]HostRule
		what string
	}{{r.AllowHosts, &out.AllowHosts, "allowed"}, {r.DenyHosts, &out.DenyHosts, "denied"}} {
		if len(list.in) > MaxHostRules {
			return r, fmt.Errorf("%d %s hosts: at most %d: %w", len(list.in), list.what, MaxHostRules, errdefs.ErrInvalidArgument)
		}
		for _, h := range list.in {
			n, err := ParseHostRule(h.String())
			if err != nil {
				return r, err
			}
			*list.out = append(*list.out, n)
		}
		slices.SortFunc(*list.out, func(a, b HostRule) int { return strings.Compare(a.String(), b.String()) })
		*list.out = slices.Compact(*list.out)
	}
	if len(r.AllowCIDRs) > MaxCIDRs {
		return r, fmt.Errorf("%d cidrs: at most %d: %w", len(r.AllowCIDRs), MaxCIDRs, errdefs.ErrInvalidArgument)
	}
	for _, p := range r.AllowCIDRs {
		if !p.IsValid() {
			return r, fmt.Errorf("an allowed cidr is not a prefix: %w", errdefs.ErrInvalidArgument)
		}
		if a := p.Addr(); a.Is4In6() {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96).Masked()
			if !p.IsValid() {
				return r, fmt.Errorf("cidr %s: an IPv4-mapped prefix must be at least /96: %w", a, errdefs.ErrInvalidArgument)
			}
		}
		p = p.Masked()
		if !admin {
			if name, ok := OverlapsReserved(p); ok {
				return r, fmt.Errorf("cidr %s covers %s addresses, which only the admin may allow: %w", p, name, errdefs.ErrPermissionDenied)
			}
		}
		out.AllowCIDRs = append(out.AllowCIDRs, p)
	}
	slices.SortFunc(out.AllowCIDRs, func(a, b netip.Prefix) int { return strings.Compare(a.String(), b.String()) })
	out.AllowCIDRs = slices.Compact(out.AllowCIDRs)
	if len(r.Secrets) > MaxSecretRefs {
		return r, fmt.Errorf("%d secrets: at most %d: %w", len(r.Secrets), MaxSecretRefs, errdefs.ErrInvalidArgument)
	}
	seen := map[string]bool{}
	for _, s := range r.Secrets {
		if !ValidSecretName(s.Name) {
			return r, fmt.Errorf("secret name %q: want letters, digits and _, not starting with a digit, at most 128 bytes: %w", clip(s.Name), errdefs.ErrInvalidArgument)
		}
		if seen[s.Name] {
			return r, fmt.Errorf("secret %s is given twice: %w", s.Name, errdefs.ErrInvalidArgument)
		}
		seen[s.Name] = true
		if len(s.Hosts) == 0 {
			return r, fmt.Errorf("secret %s is bound to no host: give --secret %s=HOST[,HOST...]: %w", s.Name, s.Name, errdefs.ErrInvalidArgument)
		}
		if len(s.Hosts) > MaxSecretHosts {
			return r, fmt.Errorf("secret %s: %d hosts, at most %d: %w", s.Name, len(s.Hosts), MaxSecretHosts, errdefs.ErrInvalidArgument)
		}
		n := SecretRef{Name: s.Name}
		for _, h := range s.Hosts {
			hr, err := ParseHostRule(h)
			if err != nil {
				return r, fmt.Errorf("secret %s: %w", s.Name, err)
			}
			if hr.Port != 0 {
				return r, fmt.Errorf("secret %s: host %q: a secret is bound to a host name, without a port: %w", s.Name, clip(h), errdefs.ErrInvalidArgument)
			}
			n.Hosts = append(n.Hosts, hr.Host)
		}
		slices.Sort(n.Hosts)
		n.Hosts = slices.Compact(n.Hosts)
		out.Secrets = append(out.Secrets, n)
	}
	slices.SortFunc(out.Secrets, func(a, b SecretRef) int { return strings.Compare(a.Name, b.Name) })
	if m == ModeNone && len(out.Secrets) > 0 {
		return r, fmt.Errorf("--network none has no way out, so secrets cannot be used: drop --secret or choose egress: %w", errdefs.ErrInvalidArgument)
	}
	return out, nil
}

// Verdict is a decision and the rule (or reason) that made it.
type Verdict struct {
	Allow bool
	Rule  string
}

// DecideName decides on a connection to name (canonical) on port, before
// any address is known (steps 1 and 2 of the package comment).
func (r Rules) DecideName(name string, port int) Verdict {
	if r.Mode == ModeNone {
		return Verdict{Rule: "network none"}
	}
	for _, d := range r.DenyHosts {
		if d.Matches(name, port) {
			return Verdict{Rule: "deny-host " + d.String()}
		}
	}
	if r.Mode == ModeOpen {
		return Verdict{Allow: true, Rule: "open"}
	}
	for _, a := range r.AllowHosts {
		if a.Matches(name, port) {
			return Verdict{Allow: true, Rule: "allow-host " + a.String()}
		}
	}
	return Verdict{Rule: "not in the allowlist"}
}

// DecideAddr decides on connecting to addr (step 3 for an address a name
// resolved to, step 4 for a bare address). named says the address came
// from resolving an allowed name; trusted that the operator's static
// overrides gave it (which lifts the reserved-range refusal).
func (r Rules) DecideAddr(addr netip.Addr, named, trusted bool) Verdict {
	addr = addr.Unmap()
	if r.Mode == ModeNone {
		return Verdict{Rule: "network none"}
	}
	for _, p := range r.AllowCIDRs {
		if p.Contains(addr) {
			return Verdict{Allow: true, Rule: "allow-cidr " + p.String()}
		}
	}
	if name, ok := Reserved(addr); ok && !trusted {
		return Verdict{Rule: "reserved address " + addr.String() + " (" + name + ")"}
	}
	if named {
		return Verdict{Allow: true}
	}
	if r.Mode == ModeOpen {
		return Verdict{Allow: true, Rule: "open"}
	}
	return Verdict{Rule: "a bare address needs --allow-cidr"}
}

func clip(s string) string {
	if len(s) <= 80 {
		return s
	}
	return s[:80] + "…"
}
