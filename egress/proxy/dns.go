package proxy

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/reinsdev/reins/egress"
)

const (
	dnsTTL        = 60
	dnsInFlight   = 256 // lookups at once, all sandboxes
	dnsPerSandbox = 16  // lookups at once, one sandbox
	nameCacheSize = 4096
)

// ServeDNS answers the DNS queries of sandboxes on pc: A queries for
// names the rules allow (and that resolve to an address the sandbox may
// reach), with a synthetic address that stands for the name (nameCache);
// AAAA with no address (sandboxes have no IPv6); everything else refused,
// and unlisted names NXDOMAIN without any query leaving the host. A
// sandbox has at most dnsPerSandbox queries being answered at once, and
// all of them dnsInFlight; a query over either is answered SERVFAIL at
// once (retry), so a sandbox looking up names that resolve slowly holds
// up no other sandbox, and the loop reading queries never waits. It
// returns nil once Close stops it.
func (p *Proxy) ServeDNS(pc net.PacketConn) error {
	if !p.track(pc, nil, pc.Close) {
		pc.Close()
		return nil
	}
	defer p.untrack(pc)
	sem := make(chan struct{}, dnsInFlight)
	for {
		buf := make([]byte, 1500)
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if p.isClosed() {
				return nil
			}
			if isTimeout(err) {
				continue
			}
			return err
		}
		st, err := p.sandboxFor(from)
		if err != nil {
			p.log.Warn("egress proxy: DNS query refused", "err", err)
			continue
		}
		if !st.dnsTake() {
			p.overLimit(pc, from, st, buf[:n], "too many DNS queries in flight (limit "+strconv.Itoa(dnsPerSandbox)+" a sandbox)")
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			st.dnsBusy.Add(-1)
			p.overLimit(pc, from, st, buf[:n], "too many DNS queries in flight (limit "+strconv.Itoa(dnsInFlight)+" for all sandboxes)")
			continue
		}
		if !p.add() {
			return nil
		}
		go func() {
			defer func() { <-sem; st.dnsBusy.Add(-1); p.wg.Done() }()
			if out := p.answer(st, buf[:n]); out != nil {
				pc.WriteTo(out, from)
			}
		}()
	}
}

// dnsTake counts a query of st in flight, unless it has dnsPerSandbox.
func (st *sandboxState) dnsTake() bool {
	if st.dnsBusy.Add(1) > dnsPerSandbox {
		st.dnsBusy.Add(-1)
		return false
	}
	return true
}

// overLimit answers a query over a limit with SERVFAIL, and logs it.
func (p *Proxy) overLimit(pc net.PacketConn, from net.Addr, st *sandboxState, q []byte, rule string) {
	var parser dnsmessage.Parser
	h, err := parser.Start(q)
	if err != nil || h.Response {
		return
	}
	e := egress.Entry{Time: time.Now(), Sandbox: st.id, Proto: "dns", Rule: rule}
	if qs, err := parser.Question(); err == nil {
		e.Host = egress.CanonicalName(qs.Name.String())
	}
	p.emit(e)
	reply := dnsmessage.Message{Header: dnsmessage.Header{ID: h.ID, Response: true, RecursionDesired: h.RecursionDesired,
		RecursionAvailable: true, RCode: dnsmessage.RCodeServerFailure}}
	if out := pack(reply); out != nil {
		pc.WriteTo(out, from)
	}
}

// answer is the reply to one query (nil for one not worth a reply).
func (p *Proxy) answer(st *sandboxState, q []byte) []byte {
	var parser dnsmessage.Parser
	h, err := parser.Start(q)
	if err != nil || h.Response {
		return nil
	}
	qs, err := parser.AllQuestions()
	reply := dnsmessage.Message{Header: dnsmessage.Header{ID: h.ID, Response: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}}
	if err != nil || len(qs) != 1 || h.OpCode != 0 {
		reply.RCode = dnsmessage.RCodeFormatError
		return pack(reply)
	}
	question := qs[0]
	reply.Questions = qs
	name := egress.CanonicalName(question.Name.String())
	e := egress.Entry{Time: time.Now(), Sandbox: st.id, Proto: "dns", Host: name}
	defer func() { p.emit(e) }()
	rules, _ := st.view()
	v, port := dnsVerdict(rules, name)
	e.Rule = v.Rule
	switch {
	case question.Class != dnsmessage.ClassINET || question.Type != dnsmessage.TypeA && question.Type != dnsmessage.TypeAAAA:
		reply.RCode = dnsmessage.RCodeRefused
		e.Rule, e.Note = "only A and AAAA queries are answered", "type "+strings.TrimPrefix(question.Type.String(), "Type")
		return pack(reply)
	case !v.Allow:
		reply.RCode = dnsmessage.RCodeNameError
		return pack(reply)
	case question.Type == dnsmessage.TypeAAAA:
		e.Allowed, e.Note = true, "AAAA: no IPv6 in sandboxes"
		return pack(reply)
	}
	d := p.decide(context.Background(), rules, target{name: name, port: port}, netip.Addr{})
	var addrs []string
	for _, a := range d.addrs {
		if a.Is4() {
			addrs = append(addrs, a.String())
		}
	}
	if len(addrs) == 0 {
		reply.RCode = dnsmessage.RCodeNameError
		e.Rule = d.Rule
		if d.Allow {
			e.Rule = name + " has no IPv4 address the sandbox may reach"
		}
		return pack(reply)
	}
	// The answer is a synthetic address that stands for the name (see
	// nameCache): the proxy connects to what the name resolves to.
	fake := st.names.fakeFor(name)
	reply.Answers = append(reply.Answers, dnsmessage.Resource{
		Header: dnsmessage.ResourceHeader{Name: question.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: dnsTTL},
		Body:   &dnsmessage.AResource{A: fake.As4()},
	})
	e.Allowed, e.Addr = true, addrs[0]
	e.Note = "answered " + fake.String() + " for " + strings.Join(addrs, ", ")
	return pack(reply)
}

// dnsVerdict decides a name for DNS, where no port is known: allowed if
// the rules allow it on some port, and that port.
func dnsVerdict(rules egress.Rules, name string) (egress.Verdict, int) {
	if !egress.ValidName(name) {
		return egress.Verdict{Rule: "not a host name"}, 0
	}
	if _, ok := legacyIPv4(name); ok || numericTLD(name) {
		return egress.Verdict{Rule: "an address is not a name"}, 0
	}
	v := rules.DecideName(name, 0)
	if v.Allow {
		return v, 0
	}
	for _, r := range rules.AllowHosts {
		if r.Port != 0 && r.Matches(name, r.Port) {
			if pv := rules.DecideName(name, r.Port); pv.Allow {
				return pv, r.Port
			}
		}
	}
	return v, 0
}

func pack(m dnsmessage.Message) []byte {
	b, err := m.Pack()
	if err != nil {
		return nil
	}
	return b
}

// nameCache gives, per sandbox, each allowed name the sandbox looks up a
// synthetic address of its own in FakeRange, and remembers the name each
// stands for, so a later connection to that address (a program that
// ignores the proxy variables, or speaks neither HTTP nor TLS) is decided
// by the name and sent where the name resolves to now. Synthetic
// addresses, rather than the real ones, because a real answer can be an
// address the sandbox would take for its own (an operator's name on
// 127.0.0.1, or in the router's subnet), because two names sharing one
// address (a CDN) would be told apart by nothing, and because the
// sandbox then learns nothing of the service side's addresses. It
// forgets the oldest beyond its size.
type nameCache struct {
	mu    sync.Mutex
	names map[netip.Addr]string
	fakes map[string]netip.Addr
	order []netip.Addr
	size  int
	next  uint32
}

// FakeRange holds the synthetic addresses the sandbox DNS answers with:
// IANA's benchmarking range, which no real host uses. It is reserved
// (egress.Reserved), so an address in it the DNS never gave is refused.
var FakeRange = netip.MustParsePrefix("198.18.0.0/15")

func newNameCache(size int) *nameCache {
	return &nameCache{names: map[netip.Addr]string{}, fakes: map[string]netip.Addr{}, size: size}
}

// fakeFor returns name's synthetic address, giving it one if it has none.
func (c *nameCache) fakeFor(name string) netip.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a, ok := c.fakes[name]; ok {
		return a
	}
	base := FakeRange.Addr().As4()
	span := uint32(1) << (32 - FakeRange.Bits())
	var a netip.Addr
	for {
		c.next = c.next%(span-2) + 1 // skip the range's first and last
		n := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3]) + c.next
		a = netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
		if _, taken := c.names[a]; !taken {
			break
		}
	}
	if len(c.order) >= c.size {
		old := c.order[0]
		delete(c.fakes, c.names[old])
		delete(c.names, old)
		c.order = c.order[1:]
	}
	c.order = append(c.order, a)
	c.names[a], c.fakes[name] = name, a
	return a
}

func (c *nameCache) get(a netip.Addr) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.names[a]
	return n, ok
}
