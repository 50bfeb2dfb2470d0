package wire

import (
	"fmt"
	"net/netip"
	"time"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/store"
)

var networkModes = newEnum("NetworkMode", map[egress.Mode]reinsv1.NetworkMode{
	egress.ModeNone:   reinsv1.NetworkMode_NETWORK_MODE_NONE,
	egress.ModeEgress: reinsv1.NetworkMode_NETWORK_MODE_EGRESS,
	egress.ModeOpen:   reinsv1.NetworkMode_NETWORK_MODE_OPEN,
})

// NetworkMode converts a network mode ("" is UNSPECIFIED, which reads
// back as egress's default).
func NetworkMode(m egress.Mode) reinsv1.NetworkMode { return networkModes.proto(m) }

// NetworkModeFromProto converts a wire mode back ("" if unspecified).
func NetworkModeFromProto(p reinsv1.NetworkMode) egress.Mode { return networkModes.fromProto(p) }

// Network converts a sandbox's network rules for the wire. Secrets go by
// name and hosts: a value is never part of the rules.
func Network(r egress.Rules) *reinsv1.Network {
	p := &reinsv1.Network{Mode: NetworkMode(r.Mode), AllowHosts: HostRules(r.AllowHosts), DenyHosts: HostRules(r.DenyHosts),
		Secrets: SecretBindings(r.Secrets)}
	for _, c := range r.AllowCIDRs {
		p.AllowCidrs = append(p.AllowCidrs, c.String())
	}
	return p
}

// HostRules converts host rules to the form users write them in.
func HostRules(rs []egress.HostRule) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.String())
	}
	return out
}

// SecretBindings converts secret bindings for the wire.
func SecretBindings(refs []egress.SecretRef) []*reinsv1.SecretBinding {
	var out []*reinsv1.SecretBinding
	for _, s := range refs {
		out = append(out, &reinsv1.SecretBinding{Name: s.Name, Hosts: s.Hosts})
	}
	return out
}

// NetworkFromProto reads wire rules (nil is the zero Rules: egress mode,
// nothing allowed). A host or cidr that does not parse is the egress
// package's errdefs.ErrInvalidArgument; the rules are not normalized
// (egress.Rules.Normalize is the caller's, who knows whether the admin
// asks).
func NetworkFromProto(p *reinsv1.Network) (egress.Rules, error) {
	if p == nil {
		return egress.Rules{}, nil
	}
	mode, err := CheckedNetworkMode(p.Mode)
	if err != nil {
		return egress.Rules{}, err
	}
	r := egress.Rules{Mode: mode}
	if r.AllowHosts, err = HostRulesFromProto(p.AllowHosts); err != nil {
		return egress.Rules{}, err
	}
	if r.DenyHosts, err = HostRulesFromProto(p.DenyHosts); err != nil {
		return egress.Rules{}, err
	}
	if r.AllowCIDRs, err = CIDRsFromProto(p.AllowCidrs); err != nil {
		return egress.Rules{}, err
	}
	r.Secrets = SecretBindingsFromProto(p.Secrets)
	return r, nil
}

// HostRulesFromProto parses host rules (HOST or HOST:PORT).
func HostRulesFromProto(hosts []string) ([]egress.HostRule, error) {
	return parseAll(hosts, egress.ParseHostRule)
}

// CIDRsFromProto parses prefixes (or single addresses).
func CIDRsFromProto(cidrs []string) ([]netip.Prefix, error) {
	return parseAll(cidrs, egress.ParseCIDR)
}

// parseAll parses each of items, stopping at the first error.
func parseAll[T any](items []string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, s := range items {
		v, err := parse(s)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// SecretBindingsFromProto converts wire secret bindings back (checked by
// Normalize).
func SecretBindingsFromProto(bs []*reinsv1.SecretBinding) []egress.SecretRef {
	var out []egress.SecretRef
	for _, b := range bs {
		out = append(out, egress.SecretRef{Name: b.GetName(), Hosts: b.GetHosts()})
	}
	return out
}

// EgressEntry converts one entry of an egress log for the wire.
func EgressEntry(r store.EgressRecord) *reinsv1.EgressLogEntry {
	e := r.Entry
	var at int64
	if !e.Time.IsZero() {
		at = e.Time.UnixNano()
	}
	return &reinsv1.EgressLogEntry{Seq: r.Seq, Sandbox: e.Sandbox, TimeUnixNano: at, Proto: e.Proto, Host: e.Host,
		Port: int32(e.Port), Addr: e.Addr, Allowed: e.Allowed, Rule: e.Rule, BytesOut: e.BytesOut, BytesIn: e.BytesIn,
		DurationNano: int64(e.Duration), Note: e.Note}
}

// EgressEntryFromProto converts a wire entry back.
func EgressEntryFromProto(p *reinsv1.EgressLogEntry) store.EgressRecord {
	var at time.Time
	if p.TimeUnixNano != 0 {
		at = time.Unix(0, p.TimeUnixNano).UTC()
	}
	return store.EgressRecord{Seq: p.Seq, Entry: egress.Entry{Time: at, Sandbox: p.Sandbox, Proto: p.Proto, Host: p.Host,
		Port: int(p.Port), Addr: p.Addr, Allowed: p.Allowed, Rule: p.Rule, BytesOut: p.BytesOut, BytesIn: p.BytesIn,
		Duration: time.Duration(p.DurationNano), Note: p.Note}}
}

// CheckedNetworkMode converts a wire mode back, refusing one this build
// does not know (invalid argument): it must not read as the default.
// UNSPECIFIED is "".
func CheckedNetworkMode(p reinsv1.NetworkMode) (egress.Mode, error) {
	m := networkModes.fromProto(p)
	if m == "" && p != reinsv1.NetworkMode_NETWORK_MODE_UNSPECIFIED {
		return "", fmt.Errorf("network mode %d is not one this service knows: want none, egress or open: %w", p, errdefs.ErrInvalidArgument)
	}
	return m, nil
}
