package proxy

import (
	"bytes"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/reinsdev/reins/egress"
)

const (
	dnsA    = dnsmessage.TypeA
	dnsAAAA = dnsmessage.TypeAAAA
)

type dnsAnswer struct {
	rcode dnsmessage.RCode
	addrs []netip.Addr
	n     int // answers of any type
}

// query sends one query from the sandbox's address and reads the answer.
func (e *env) query(t *testing.T, name string, typ dnsmessage.Type) dnsAnswer {
	return e.queryFrom(t, sbAddr, name, typ, true)
}

func (e *env) queryFrom(t *testing.T, src netip.Addr, name string, typ dnsmessage.Type, wantReply bool) dnsAnswer {
	t.Helper()
	pc, err := net.ListenPacket("udp", net.JoinHostPort(src.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	m := dnsmessage.Message{Header: dnsmessage.Header{ID: 77, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}}}
	b, _ := m.Pack()
	to, _ := net.ResolveUDPAddr("udp", e.dnsAddr)
	if _, err := pc.WriteTo(b, to); err != nil {
		t.Fatal(err)
	}
	wait := 2 * time.Second
	if !wantReply {
		wait = 300 * time.Millisecond
	}
	pc.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 1500)
	n, _, err := pc.ReadFrom(buf)
	if !wantReply {
		if err == nil {
			t.Fatalf("%s: a reply to a query from no sandbox", name)
		}
		return dnsAnswer{}
	}
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var r dnsmessage.Message
	if err := r.Unpack(buf[:n]); err != nil {
		t.Fatal(err)
	}
	if r.ID != 77 || !r.Response {
		t.Fatalf("reply header %+v", r.Header)
	}
	a := dnsAnswer{rcode: r.RCode, n: len(r.Answers)}
	for _, an := range r.Answers {
		if ar, ok := an.Body.(*dnsmessage.AResource); ok {
			a.addrs = append(a.addrs, netip.AddrFrom4(ar.A))
		}
	}
	return a
}

func TestDNS(t *testing.T) {
	e := newEnv(t, allowHosts("*.allowed.test", "api.test:443", "rebind.test"), nil)
	pub := netip.MustParseAddr("93.184.215.14")
	e.res.set("www.allowed.test", pub, netip.MustParseAddr("2606:2800::1"))
	e.res.set("api.test", pub)
	e.res.set("rebind.test", netip.MustParseAddr("169.254.169.254"))
	e.res.set("unlisted.test", pub)
	e.override("mirror.allowed.test", localhost)

	for _, tc := range []struct {
		name  string
		typ   dnsmessage.Type
		rcode dnsmessage.RCode
		addrs []netip.Addr
	}{
		{"WWW.Allowed.Test.", dnsA, dnsmessage.RCodeSuccess, []netip.Addr{pub}}, // no IPv6 answer
		{"api.test.", dnsA, dnsmessage.RCodeSuccess, []netip.Addr{pub}},         // a port rule
		{"mirror.allowed.test.", dnsA, dnsmessage.RCodeSuccess, []netip.Addr{localhost}},
		{"www.allowed.test.", dnsAAAA, dnsmessage.RCodeSuccess, nil},
		{"rebind.test.", dnsA, dnsmessage.RCodeNameError, nil},
		{"unlisted.test.", dnsA, dnsmessage.RCodeNameError, nil},
		{"unlisted.test.", dnsAAAA, dnsmessage.RCodeNameError, nil},
		{"allowed.test.", dnsA, dnsmessage.RCodeNameError, nil}, // *.x does not cover x
		{"exfil-c2VjcmV0.unlisted.test.", dnsA, dnsmessage.RCodeNameError, nil},
		{"www.allowed.test.", dnsmessage.TypeTXT, dnsmessage.RCodeRefused, nil},
		{"unlisted.test.", dnsmessage.TypeMX, dnsmessage.RCodeRefused, nil},
	} {
		// An allowed name is answered with one synthetic address of
		// its own (FakeRange), the same each time it is asked; the
		// entry names the real ones.
		a := e.query(t, tc.name, tc.typ)
		want := len(tc.addrs)
		if want > 0 {
			want = 1
		}
		if a.rcode != tc.rcode || a.n != want || len(a.addrs) != want {
			t.Errorf("%s %v: got %v %v (%d answers), want %v and %d synthetic address", tc.name, tc.typ, a.rcode, a.addrs, a.n, tc.rcode, want)
			continue
		}
		if want == 0 {
			continue
		}
		if !FakeRange.Contains(a.addrs[0]) {
			t.Errorf("%s: answered %v, not a synthetic address", tc.name, a.addrs[0])
		}
		if again := e.query(t, tc.name, tc.typ); len(again.addrs) != 1 || again.addrs[0] != a.addrs[0] {
			t.Errorf("%s: asked again, answered %v, then %v", tc.name, a.addrs, again.addrs)
		}
		real, fake := tc.addrs[0].String(), a.addrs[0].String()
		name := egress.CanonicalName(tc.name)
		// Entries reach the log a moment after the answer.
		e.waitEntries(func(es []egress.Entry) bool {
			for _, en := range es {
				if en.Proto == "dns" && en.Host == name && en.Addr == real && strings.Contains(en.Note, fake) {
					return true
				}
			}
			return false
		})
	}
	asked := e.res.calls()
	slices.Sort(asked)
	asked = slices.Compact(asked)
	if want := []string{"api.test", "rebind.test", "www.allowed.test"}; !slices.Equal(asked, want) {
		t.Fatalf("the resolver was asked %v, want only %v", asked, want)
	}
	es := e.waitEntries(func(es []egress.Entry) bool { return len(es) >= 11 })
	for _, en := range es {
		if en.Proto != "dns" || en.Sandbox != "sb-test" {
			t.Errorf("entry %+v", en)
		}
		if en.Host == "unlisted.test" && (en.Allowed || en.Rule == "") {
			t.Errorf("entry %+v", en)
		}
		if en.Host == "rebind.test" && (en.Allowed || !bytes.Contains([]byte(en.Rule), []byte("reserved address 169.254.169.254"))) {
			t.Errorf("entry %+v", en)
		}
	}
	// From no sandbox: no answer at all.
	e.queryFrom(t, otherAddr, "www.allowed.test.", dnsA, false)
}
