// Package egress is the vocabulary of a sandbox's network boundary: the
// mode a sandbox runs in, the rules that decide which connections leave it,
// the secrets the proxy puts into requests on its way out, and the entries
// of its egress log. The proxy (egress/proxy), the namespaces and firewall
// (egress/netns) and the service that joins them (egress/boundary) import
// it, never the reverse.
//
// A sandbox is in one of three modes:
//
//	none    loopback only: no interface but lo, no proxy, no DNS.
//	egress  (the default) traffic leaves only through the service's proxy,
//	        to the hosts its allowlist names; DNS answers allowed names only.
//	open    any public host, through the same proxy, still logged.
//
// In egress and open mode every TCP connection a sandbox makes reaches the
// proxy (the firewall redirects what ignores the proxy variables); the
// proxy decides by name (an HTTP request's Host, a TLS ClientHello's SNI,
// or the name the sandbox looked up for that address), resolves the name
// itself, and connects to what it resolves to, never to the sandbox's idea
// of the address. A decision goes in this order:
//
//  1. a DenyHosts rule that matches the name denies;
//  2. in egress mode an AllowHosts rule must match the name (and port);
//     in open mode any name may go;
//  3. every address the name resolves to must be public, unless an
//     AllowCIDRs prefix covers it or the operator named it (serve
//     --egress-resolve): loopback, private, link-local (cloud metadata),
//     shared, multicast and reserved ranges are refused;
//  4. a connection to a bare address (no name) needs an AllowCIDRs prefix
//     that covers it in egress mode, and a public address (or a prefix) in
//     open mode.
//
// The service's own listeners are never reached, whatever the rules say.
// Rules change on a running sandbox; a connection already open that the
// new rules deny is closed.
package egress

import (
	"net/netip"
	"time"
)

// Mode is how much network a sandbox has.
type Mode string

const (
	ModeNone   Mode = "none"
	ModeEgress Mode = "egress"
	ModeOpen   Mode = "open"
)

// HostRule names a host a sandbox may (or may not) reach: an exact name
// ("api.github.com") or every name under a domain ("*.github.com", which
// does not match github.com itself), on one port or, with Port 0, any.
type HostRule struct {
	Host string `json:"host"`
	Port int    `json:"port,omitempty"`
}

// SecretRef binds a stored secret to the hosts it may be sent to: the
// sandbox sees NAME set to a placeholder, and the proxy swaps the
// placeholder for the value in requests to those hosts only.
type SecretRef struct {
	Name  string   `json:"name"`
	Hosts []string `json:"hosts"` // host names, "*.domain" allowed
}

// Rules are a sandbox's network rules, as the user gave them (normalized
// by Normalize).
type Rules struct {
	Mode       Mode           `json:"mode,omitempty"` // "" is egress
	AllowHosts []HostRule     `json:"allow_hosts,omitempty"`
	DenyHosts  []HostRule     `json:"deny_hosts,omitempty"`
	AllowCIDRs []netip.Prefix `json:"allow_cidrs,omitempty"`
	Secrets    []SecretRef    `json:"secrets,omitempty"`
}

// Entry is one line of a sandbox's egress log: one connection (or, for
// HTTP the proxy reads, one request; for DNS, one query) allowed or denied.
type Entry struct {
	Time    time.Time `json:"time"`
	Sandbox string    `json:"sandbox"`
	// Proto is how the proxy saw it: "http" (a request it read), "https"
	// (a TLS connection it terminated to put a secret in), "tls" (a TLS
	// tunnel, by SNI), "tcp" (bytes, by address), "dns" (a query).
	Proto string `json:"proto"`
	Host  string `json:"host,omitempty"` // the name asked for; "" for a bare address
	Port  int    `json:"port,omitempty"`
	Addr  string `json:"addr,omitempty"` // the address the proxy connected to (or would have)
	// Allowed says what was decided and Rule why: the rule that matched
	// ("allow-host *.github.com", "open", "allow-cidr 10.0.0.0/8") or
	// the reason for a refusal ("not in the allowlist", "deny-host x",
	// "reserved address 127.0.0.1 (loopback)").
	Allowed  bool          `json:"allowed"`
	Rule     string        `json:"rule"`
	BytesOut int64         `json:"bytes_out,omitempty"` // sandbox to host
	BytesIn  int64         `json:"bytes_in,omitempty"`  // host to sandbox
	Duration time.Duration `json:"duration,omitempty"`
	// Note tells what else happened: "secret GITHUB_TOKEN injected",
	// "placeholder of secret X sent to a host it is not bound to (not
	// replaced)", "closed: the rules changed".
	Note string `json:"note,omitempty"`
}
