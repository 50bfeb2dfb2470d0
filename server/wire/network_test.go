package wire

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/proto"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/server/wire/wiretest"
	"github.com/reinsdev/reins/store"
)

// codecs are the wire's two encodings.
var codecs = map[string]struct {
	marshal   func(proto.Message) ([]byte, error)
	unmarshal func([]byte, proto.Message) error
}{"binary": {proto.Marshal, proto.Unmarshal}, "json": {JSON.Marshal, func(b []byte, m proto.Message) error { return JSONCodec{}.Unmarshal(b, m) }}}

// TestNetworkRoundTrip: normalized rules, every field set, go to the wire
// (binary and JSON) and back unchanged; so does the zero value.
func TestNetworkRoundTrip(t *testing.T) {
	want := wiretest.Network()
	allSet(t, "network", reflect.ValueOf(want))
	if n, err := want.Normalize(true); err != nil || !cmp.Equal(n, want, rulesCmp...) {
		t.Fatalf("the sample is not normalized: %v %s", err, cmp.Diff(want, n, rulesCmp...))
	}
	for _, rules := range []egress.Rules{want, {}} {
		for name, c := range codecs {
			b, err := c.marshal(Network(rules))
			if err != nil {
				t.Fatal(err)
			}
			var pb reinsv1.Network
			if err := c.unmarshal(b, &pb); err != nil {
				t.Fatal(err)
			}
			got, err := NetworkFromProto(&pb)
			if err != nil {
				t.Fatalf("over %s: %v", name, err)
			}
			if d := cmp.Diff(rules, got, rulesCmp...); d != "" {
				t.Errorf("over %s (-sent +received):\n%s", name, d)
			}
		}
	}
	if got, err := NetworkFromProto(nil); err != nil || !cmp.Equal(got, egress.Rules{}, rulesCmp...) {
		t.Errorf("no network: %+v, %v", got, err)
	}
}

// rulesCmp compares rules: prefixes by value, no list the same as an
// empty one.
var rulesCmp = []cmp.Option{cmpopts.EquateComparable(netip.Prefix{}), cmpopts.EquateEmpty()}

// TestNetworkBadInput: what does not parse is the egress package's
// invalid argument, with its words.
func TestNetworkBadInput(t *testing.T) {
	for _, tc := range []struct {
		pb   *reinsv1.Network
		want string
	}{
		{&reinsv1.Network{AllowHosts: []string{"not a host"}}, "want a DNS name"},
		{&reinsv1.Network{AllowHosts: []string{"example.com:70000"}}, "from 1 to 65535"},
		{&reinsv1.Network{DenyHosts: []string{"example.com:0"}}, "from 1 to 65535"},
		{&reinsv1.Network{AllowHosts: []string{"10.0.0.1"}}, "--allow-cidr 10.0.0.1/32"},
		{&reinsv1.Network{AllowCidrs: []string{"10.0.0.0/33"}}, "want an address prefix"},
		{&reinsv1.Network{AllowCidrs: []string{"example.com"}}, "want an address prefix"},
		{&reinsv1.Network{Mode: reinsv1.NetworkMode(9)}, "want none, egress or open"},
	} {
		_, err := NetworkFromProto(tc.pb)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want invalid argument saying %q", tc.pb, err, tc.want)
		}
	}
}

// TestEgressEntryRoundTrip: an egress log entry, every field set, goes to
// the wire and back unchanged.
func TestEgressEntryRoundTrip(t *testing.T) {
	want := store.EgressRecord{Seq: 41, Entry: egress.Entry{Time: time.Unix(1700000000, 42).UTC(), Sandbox: "sbx1", Proto: "https",
		Host: "api.github.com", Port: 443, Addr: "140.82.112.6:443", Allowed: true, Rule: "allow-host api.github.com:443",
		BytesOut: 900, BytesIn: 12000, Duration: 1500 * time.Microsecond, Note: "secret GITHUB_TOKEN injected"}}
	allSet(t, "egress entry", reflect.ValueOf(want.Entry))
	for name, c := range codecs {
		b, err := c.marshal(EgressEntry(want))
		if err != nil {
			t.Fatal(err)
		}
		var pb reinsv1.EgressLogEntry
		if err := c.unmarshal(b, &pb); err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(want, EgressEntryFromProto(&pb)); d != "" {
			t.Errorf("over %s (-sent +received):\n%s", name, d)
		}
	}
}
