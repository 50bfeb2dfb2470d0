package proxy

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/reinsdev/reins/egress"
)

const (
	dnsTTL        = 60
	dnsInFlight   = 64
	nameCacheSize = 4096
)

// ServeDNS answers the DNS queries of sandboxes on pc: A queries for
// names the rules allow, with the addresses the proxy would connect to;
// AAAA with no address (sandboxes have no IPv6); everything else refused,
// and unlisted names NXDOMAIN without any query leaving the host. It
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
		sem <- struct{}{}
		if !p.add() {
			return nil
		}
		go func() {
			defer func() { <-sem; p.wg.Done() }()
			if out := p.answer(st, buf[:n]); out != nil {
				pc.WriteTo(out, from)
			}
		}()
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
		if !a.Is4() {
			continue
		}
		st.names.put(a, name)
		addrs = append(addrs, a.String())
		reply.Answers = append(reply.Answers, dnsmessage.Resource{
			Header: dnsmessage.ResourceHeader{Name: question.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: dnsTTL},
			Body:   &dnsmessage.AResource{A: a.As4()},
		})
	}
	if len(addrs) == 0 {
		reply.RCode = dnsmessage.RCodeNameError
		e.Rule = d.Rule
		if d.Allow {
			e.Rule = name + " has no IPv4 address the sandbox may reach"
		}
		return pack(reply)
	}
	e.Allowed, e.Addr = true, addrs[0]
	e.Note = "answered " + strings.Join(addrs, ", ")
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

// nameCache remembers, per sandbox, the name each address was the answer
// for, so a later connection to the address is decided by that name. It
// forgets the oldest beyond its size.
type nameCache struct {
	mu    sync.Mutex
	names map[netip.Addr]string
	order []netip.Addr
	size  int
}

func newNameCache(size int) *nameCache {
	return &nameCache{names: map[netip.Addr]string{}, size: size}
}

func (c *nameCache) put(a netip.Addr, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.names[a]; !ok {
		if len(c.order) >= c.size {
			delete(c.names, c.order[0])
			c.order = c.order[1:]
		}
		c.order = append(c.order, a)
	}
	c.names[a] = name
}

func (c *nameCache) get(a netip.Addr) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.names[a]
	return n, ok
}
