package trusted

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/reinsdev/reins/errdefs"
)

// hostPattern is one entry of AllowedHosts or Secrets.
type hostPattern struct {
	host string // lower case; "*.example.com" for a wildcard; an IP in canonical form
	port string // "" for the scheme's default
}

func parseHostPattern(s string) (hostPattern, error) {
	orig := s
	s = strings.ToLower(strings.TrimSpace(s))
	var p hostPattern
	if h, port, err := net.SplitHostPort(s); err == nil {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return p, fmt.Errorf("http_request: allowed host %q: bad port: %w", orig, errdefs.ErrInvalidArgument)
		}
		s, p.port = h, port
	}
	s = strings.TrimSuffix(strings.Trim(s, "[]"), ".")
	if a, err := netip.ParseAddr(s); err == nil {
		s = a.Unmap().String()
	} else if rest, ok := strings.CutPrefix(s, "*."); (ok && (rest == "" || strings.ContainsAny(rest, "*/@"))) ||
		(!ok && (s == "" || strings.ContainsAny(s, "*/@"))) {
		return p, fmt.Errorf("http_request: allowed host %q: want a host name, *.domain or an IP, with an optional :port: %w",
			orig, errdefs.ErrInvalidArgument)
	}
	p.host = s
	return p, nil
}

func (p hostPattern) String() string {
	h := p.host
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	if p.port != "" {
		return h + ":" + p.port
	}
	return h
}

// matches reports whether p allows u (its scheme must be http or https).
func (p hostPattern) matches(u *url.URL) bool {
	host, port := urlHostPort(u)
	if p.port == "" {
		if port != defaultPort(u.Scheme) {
			return false
		}
	} else if port != p.port {
		return false
	}
	if rest, ok := strings.CutPrefix(p.host, "*."); ok {
		return strings.HasSuffix(host, "."+rest)
	}
	return host == p.host
}

// urlHostPort returns u's host in the form patterns use, and its port.
func urlHostPort(u *url.URL) (string, string) {
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.Unmap().String()
	}
	port := u.Port()
	if port == "" {
		port = defaultPort(u.Scheme)
	}
	return host, port
}

func defaultPort(scheme string) string {
	if strings.EqualFold(scheme, "https") {
		return "443"
	}
	return "80"
}

func (h *HTTP) allowed(u *url.URL) bool {
	for _, p := range h.allow {
		if p.matches(u) {
			return true
		}
	}
	return false
}

func (h *HTTP) allowedList() string {
	s := make([]string, len(h.allow))
	for i, p := range h.allow {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

// URLHost returns the host an http_request call with url raw would go to:
// the URL's host name in lower case, without port or trailing dot
// ("api.example.com", "127.0.0.1", "::1"); false for a URL it never
// fetches. http_request's spec declares it, and the policy matches its
// host globs against it.
func URLHost(raw string) (string, bool) {
	u, err := checkURL(raw)
	if err != nil {
		return "", false
	}
	host, _ := urlHostPort(u)
	return host, true
}

// checkURL parses raw and refuses what http_request never fetches.
func checkURL(raw string) (*url.URL, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, invalidf("http_request: url is required")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, invalidf("http_request: url %q: %v", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, invalidf("http_request: url %q: only http and https URLs are allowed", raw)
	}
	if u.Hostname() == "" {
		return nil, invalidf("http_request: url %q has no host", raw)
	}
	if u.User != nil {
		return nil, invalidf("http_request: url %q carries a user name or password; send credentials in headers instead", raw)
	}
	u.Fragment, u.RawFragment = "", ""
	return u, nil
}

// dial connects to addr. A name that resolves only to loopback, link-local
// (cloud metadata), unspecified or multicast addresses is refused: reaching
// those takes an allow-list entry that names the address itself (or the
// name "localhost"). Checking here, on the address actually dialed, holds
// against DNS answers that change between check and use. Private addresses
// stay reachable by name: trusted tools exist to reach private systems.
func (h *HTTP) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	if _, err := netip.ParseAddr(host); err == nil {
		return d.DialContext(ctx, network, addr)
	}
	ips, err := h.lookup(ctx, host)
	if err != nil {
		return nil, err
	}
	localName := host == "localhost" || strings.HasSuffix(host, ".localhost")
	var refused []string
	var firstErr error
	for _, ip := range ips {
		ip = ip.Unmap()
		if !ip.IsGlobalUnicast() && !(localName && ip.IsLoopback()) {
			refused = append(refused, ip.String())
			continue
		}
		c, err := d.DialContext(ctx, network, net.JoinHostPort(ip.String(), port))
		if err == nil {
			return c, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		return nil, firstErr
	}
	return nil, &refusal{fmt.Sprintf("host %s resolves to %s (loopback, link-local or otherwise special), which a host name may not reach; "+
		"a person can allow the address itself in the configuration", host, strings.Join(refused, ", "))}
}
