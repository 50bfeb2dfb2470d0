package egress

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/reinsdev/reins/errdefs"
)

func TestParseHostRule(t *testing.T) {
	good := map[string]HostRule{
		"api.github.com":          {Host: "api.github.com"},
		"API.GitHub.com.":         {Host: "api.github.com"},
		"pypi.org:443":            {Host: "pypi.org", Port: 443},
		"*.githubusercontent.com": {Host: "*.githubusercontent.com"},
		"mirror:8080":             {Host: "mirror", Port: 8080},
	}
	for in, want := range good {
		got, err := ParseHostRule(in)
		if err != nil || got != want {
			t.Errorf("ParseHostRule(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "a b", "x:0", "x:65536", "x:http", "1.2.3.4", "[::1]:443", "*.com", "*", "a..b",
		"-a.com", "a/b", "user@host", "*.*.a.com", strings.Repeat("a", 64) + ".com", "host:"} {
		if _, err := ParseHostRule(in); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ParseHostRule(%q) = %v, want invalid argument", in, err)
		}
	}
}

func TestDecide(t *testing.T) {
	r, err := Rules{
		AllowHosts: []HostRule{{Host: "*.github.com"}, {Host: "pypi.org", Port: 443}},
		DenyHosts:  []HostRule{{Host: "evil.github.com"}},
		AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")},
	}.Normalize(true)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		port int
		want bool
	}{
		{"api.github.com", 443, true}, {"github.com", 443, false}, {"evil.github.com", 443, false},
		{"pypi.org", 443, true}, {"pypi.org", 80, false}, {"example.com", 80, false},
	} {
		if v := r.DecideName(c.name, c.port); v.Allow != c.want || v.Rule == "" {
			t.Errorf("DecideName(%s, %d) = %+v, want allow=%v", c.name, c.port, v, c.want)
		}
	}
	for _, c := range []struct {
		addr           string
		named, trusted bool
		want           bool
	}{
		{"140.82.112.3", true, false, true}, {"140.82.112.3", false, false, false},
		{"127.0.0.1", true, false, false}, {"169.254.169.254", true, false, false},
		{"::ffff:127.0.0.1", true, false, false}, {"127.0.0.1", true, true, true},
		{"10.9.1.1", false, false, true}, {"10.8.1.1", true, false, false}, {"fd00::1", true, false, false},
	} {
		if v := r.DecideAddr(netip.MustParseAddr(c.addr), c.named, c.trusted); v.Allow != c.want {
			t.Errorf("DecideAddr(%s, named=%v, trusted=%v) = %+v, want allow=%v", c.addr, c.named, c.trusted, v, c.want)
		}
	}
	open := Rules{Mode: ModeOpen, DenyHosts: []HostRule{{Host: "x.com"}}}
	if !open.DecideName("example.com", 80).Allow || open.DecideName("x.com", 80).Allow {
		t.Error("open mode: any name but the denied ones")
	}
	if !open.DecideAddr(netip.MustParseAddr("93.184.216.34"), false, false).Allow || open.DecideAddr(netip.MustParseAddr("192.168.1.1"), false, false).Allow {
		t.Error("open mode: public bare addresses only")
	}
	none := Rules{Mode: ModeNone}
	if none.DecideName("a.com", 80).Allow || none.DecideAddr(netip.MustParseAddr("1.1.1.1"), true, true).Allow {
		t.Error("none allows nothing")
	}
}

func TestNormalizeRefuses(t *testing.T) {
	for _, c := range []struct {
		r     Rules
		admin bool
		kind  error
	}{
		{Rules{Mode: "closed"}, true, errdefs.ErrInvalidArgument},
		{Rules{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, false, errdefs.ErrPermissionDenied},
		{Rules{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}, false, errdefs.ErrPermissionDenied},
		{Rules{Secrets: []SecretRef{{Name: "TOKEN"}}}, true, errdefs.ErrInvalidArgument},
		{Rules{Secrets: []SecretRef{{Name: "1X", Hosts: []string{"a.com"}}}}, true, errdefs.ErrInvalidArgument},
		{Rules{Secrets: []SecretRef{{Name: "X", Hosts: []string{"a.com:443"}}}}, true, errdefs.ErrInvalidArgument},
		{Rules{Mode: ModeNone, Secrets: []SecretRef{{Name: "X", Hosts: []string{"a.com"}}}}, true, errdefs.ErrInvalidArgument},
	} {
		if _, err := c.r.Normalize(c.admin); !errors.Is(err, c.kind) {
			t.Errorf("Normalize(%+v, admin=%v) = %v, want %v", c.r, c.admin, err, c.kind)
		}
	}
	if _, err := (Rules{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}).Normalize(true); err != nil {
		t.Errorf("the admin may allow loopback: %v", err)
	}
	if _, err := (Rules{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("8.8.8.0/24")}}).Normalize(false); err != nil {
		t.Errorf("a tenant may allow a public prefix: %v", err)
	}
	if _, err := ParseCIDR("10.0.0.0/33"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("ParseCIDR(/33) = %v", err)
	}
	if r, err := ParseSecretRef("GH=api.github.com,*.github.com"); err != nil || len(r.Hosts) != 2 {
		t.Errorf("ParseSecretRef = %+v, %v", r, err)
	}
	if _, err := ParseSecretRef("GH"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("ParseSecretRef(no hosts) = %v", err)
	}
}
