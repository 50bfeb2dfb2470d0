package main

import (
	"errors"
	"net/netip"
	"testing"
)

func TestParseResolve(t *testing.T) {
	addrs, ports, err := parseResolve([]string{"Mirror.Internal.=10.0.0.5:443", "mirror.internal=10.0.0.6:8443", "open.test=127.0.0.1", "v6.test=[::1]:80"})
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs["mirror.internal"]) != 2 || addrs["open.test"][0] != netip.MustParseAddr("127.0.0.1") || addrs["v6.test"][0] != netip.MustParseAddr("::1") {
		t.Errorf("addresses: %v", addrs)
	}
	if p := ports["mirror.internal"]; len(p) != 2 || p[0] != 443 || p[1] != 8443 {
		t.Errorf("ports of mirror.internal: %v", p)
	}
	if _, ok := ports["open.test"]; ok {
		t.Errorf("a name given without a port is trusted on some ports only: %v", ports["open.test"])
	}
	// A name given once with and once without a port: every port.
	if _, ports, _ := parseResolve([]string{"x.test=10.0.0.1:80", "x.test=10.0.0.2"}); len(ports["x.test"]) != 0 {
		t.Errorf("mixed: %v", ports)
	}
	for _, bad := range []string{"x.test", "x.test=", "x.test=nope", "=1.2.3.4", "bad name=1.2.3.4", "x.test=1.2.3.4:0", "x.test=1.2.3.4:99999"} {
		var ue usageError
		if _, _, err := parseResolve([]string{bad}); !errors.As(err, &ue) {
			t.Errorf("parseResolve(%q) = %v, want a usage error", bad, err)
		}
	}
}
