package netns

import (
	"encoding/binary"
	"fmt"
	"os"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// tableName is the nftables table (family inet) in the router namespace.
const tableName = "reins"

// ipsDstNAT is conntrack's IPS_DST_NAT status bit: the connection was
// redirected by our nat chain.
const ipsDstNAT = 0x20

// installFirewall replaces the router namespace's table with the ruleset
// for ports, in one transaction: a restarted service with other ports
// gets its own rules and never a moment with none. The rules are the
// same for every sandbox (nothing per link), so Attach changes nothing
// here:
//
//	prerouting (raw, before conntrack):
//	  iif lo accept
//	  meta nfproto ipv6 drop
//	  fib saddr . iif oif missing drop   strict reverse path: the source must be routed back out of the veth it came in on
//	  ip saddr & 0.0.0.3 != 0.0.0.2 drop  and be the sandbox's end of that /30, not its network or broadcast address
//	prerouting (nat):
//	  iif lo accept
//	  udp dport 53 redirect to :DNS       any address: the service answers every query
//	  tcp dport Proxy fib daddr type local accept
//	  meta l4proto tcp redirect to :Transparent
//	input (filter, policy drop):
//	  iif lo accept
//	  ct state established,related accept
//	  tcp dport Proxy accept
//	  tcp dport Transparent ct status dnat accept
//	  udp dport DNS ct status dnat accept
//	forward (filter, policy drop)
//
// Whatever is not accepted (other UDP, ICMP, IPv6, a connection to any
// other port of the router) is dropped. A zero port leaves its rule out,
// so what it would have let in is dropped too.
func installFirewall(ns *os.File, p Ports) error {
	c, err := nftables.New(nftables.WithNetNSFd(int(ns.Fd())))
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	defer c.CloseLasting()
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: tableName}
	c.AddTable(t) // so that the delete below succeeds when there is none
	c.DelTable(t)
	c.AddTable(t)

	drop, accept := nftables.ChainPolicyDrop, nftables.ChainPolicyAccept
	raw := c.AddChain(&nftables.Chain{Name: "sources", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw, Policy: &accept})
	nat := c.AddChain(&nftables.Chain{Name: "redirect", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &accept})
	in := c.AddChain(&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &drop})

	rule := func(ch *nftables.Chain, es ...[]expr.Any) {
		var all []expr.Any
		for _, e := range es {
			all = append(all, e...)
		}
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: all})
	}

	rule(raw, fromLoopback(), verdict(expr.VerdictAccept))
	rule(raw, nfproto(unix.NFPROTO_IPV6), verdict(expr.VerdictDrop))
	rule(raw, nfproto(unix.NFPROTO_IPV4), noReversePath(), verdict(expr.VerdictDrop))
	rule(raw, nfproto(unix.NFPROTO_IPV4), notSandboxEnd(), verdict(expr.VerdictDrop))

	rule(nat, fromLoopback(), verdict(expr.VerdictAccept))
	if p.DNS > 0 {
		rule(nat, l4proto(unix.IPPROTO_UDP), dport(53), redirect(p.DNS))
	}
	if p.Proxy > 0 {
		rule(nat, l4proto(unix.IPPROTO_TCP), dport(p.Proxy), toLocal(), verdict(expr.VerdictAccept))
	}
	if p.Transparent > 0 {
		rule(nat, l4proto(unix.IPPROTO_TCP), redirect(p.Transparent))
	}

	rule(in, fromLoopback(), verdict(expr.VerdictAccept))
	rule(in, ctBits(expr.CtKeySTATE, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), verdict(expr.VerdictAccept))
	if p.Proxy > 0 {
		rule(in, l4proto(unix.IPPROTO_TCP), dport(p.Proxy), verdict(expr.VerdictAccept))
	}
	if p.Transparent > 0 {
		rule(in, l4proto(unix.IPPROTO_TCP), dport(p.Transparent), ctBits(expr.CtKeySTATUS, ipsDstNAT), verdict(expr.VerdictAccept))
	}
	if p.DNS > 0 {
		rule(in, l4proto(unix.IPPROTO_UDP), dport(p.DNS), ctBits(expr.CtKeySTATUS, ipsDstNAT), verdict(expr.VerdictAccept))
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("installing the router's nftables rules: %w", err)
	}
	return nil
}

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

// fromLoopback matches packets from the namespace's own lo (ifindex 1 in
// every network namespace).
func fromLoopback() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIF, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(1)},
	}
}

func nfproto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

func l4proto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

func dport(port int) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(uint16(port))},
	}
}

// noReversePath is `fib saddr . iif oif missing`: no route back to the
// source leaves by the interface the packet came in on.
func noReversePath() []expr.Any {
	return []expr.Any{
		&expr.Fib{Register: 1, FlagSADDR: true, FlagIIF: true, ResultOIF: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: make([]byte, 4)},
	}
}

// notSandboxEnd is `ip saddr & 0.0.0.3 != 0.0.0.2`: each link is a /30
// whose .2 is the sandbox (see addrs).
func notSandboxEnd() []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{0, 0, 0, 3}, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 2}},
	}
}

// toLocal is `fib daddr type local`.
func toLocal() []expr.Any {
	return []expr.Any{
		&expr.Fib{Register: 1, FlagDADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
	}
}

// ctBits matches when any of bits is set in the conntrack key (state or
// status).
func ctBits(key expr.CtKey, bits uint32) []expr.Any {
	mask := binary.NativeEndian.AppendUint32(nil, bits)
	return []expr.Any{
		&expr.Ct{Register: 1, Key: key},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

func redirect(port int) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(uint16(port))},
		&expr.Redir{RegisterProtoMin: 1},
	}
}
