package proxy

import (
	"bytes"
	"crypto/x509"
	"errors"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/reinsdev/reins/errdefs"
)

func TestCA(t *testing.T) {
	ca, err := NewCA("sb-1")
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseCA(ca.CertPEM(), ca.KeyPEM())
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := again.leaf("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "api.example.com", Roots: roots}); err != nil {
		t.Fatalf("a leaf of the parsed CA does not verify against the original: %v", err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "other.example.com", Roots: roots}); err == nil {
		t.Fatal("a leaf verifies for another name")
	}
	if l2, _ := again.leaf("api.example.com"); l2 != leaf {
		t.Fatal("leaf not cached")
	}
	other, _ := NewCA("sb-2")
	if _, err := ParseCA(ca.CertPEM(), other.KeyPEM()); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("another CA's key accepted: %v", err)
	}
	if _, err := ParseCA([]byte("junk"), ca.KeyPEM()); err == nil {
		t.Fatal("junk accepted")
	}
	if bytes.Contains(ca.CertPEM(), []byte("PRIVATE")) {
		t.Fatal("the certificate PEM carries a key")
	}
}

func TestPlaceholder(t *testing.T) {
	a, b := NewPlaceholder(), NewPlaceholder()
	if a == b || !regexp.MustCompile(`^reins-secret-[0-9a-f]{32}$`).MatchString(a) {
		t.Fatalf("%q %q", a, b)
	}
}

func TestCheckSecrets(t *testing.T) {
	ca, _ := NewCA("x")
	value := "sEcReT-" + strings.Repeat("v", MaxSecretValue)
	for _, tc := range []struct {
		name string
		s    []Secret
		ca   *CA
		kind error
	}{
		{"too big", []Secret{{Name: "T", Placeholder: NewPlaceholder(), Value: []byte(value), Hosts: []string{"h.test"}}}, ca, errdefs.ErrTooLarge},
		{"no CA", []Secret{{Name: "T", Placeholder: NewPlaceholder(), Value: []byte("v"), Hosts: []string{"h.test"}}}, nil, errdefs.ErrInvalidArgument},
		{"no host", []Secret{{Name: "T", Placeholder: NewPlaceholder(), Value: []byte("v")}}, ca, errdefs.ErrInvalidArgument},
		{"guessable", []Secret{{Name: "T", Placeholder: "x", Value: []byte("v"), Hosts: []string{"h.test"}}}, ca, errdefs.ErrInvalidArgument},
		{"line break", []Secret{{Name: "T", Placeholder: NewPlaceholder(), Value: []byte("sEcReT\r\nX: y"), Hosts: []string{"h.test"}}}, ca, errdefs.ErrInvalidArgument},
	} {
		err := checkSecrets(tc.s, tc.ca)
		if !errors.Is(err, tc.kind) {
			t.Errorf("%s: %v", tc.name, err)
		}
		if err != nil && strings.Contains(err.Error(), "sEcReT") {
			t.Errorf("%s: the error shows the value", tc.name)
		}
	}
}

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		in   string
		name string
		addr string
		port int
	}{
		{"Example.COM.", "example.com", "", 80},
		{"example.com:8080", "example.com", "", 8080},
		{"127.0.0.1:1", "", "127.0.0.1", 1},
		{"2130706433", "", "127.0.0.1", 80},
		{"0x7f000001", "", "127.0.0.1", 80},
		{"0177.0.0.01", "", "127.0.0.1", 80},
		{"127.1", "", "127.0.0.1", 80},
		{"10.0x10.1", "", "10.16.0.1", 80},
		{"[::ffff:169.254.169.254]:80", "", "169.254.169.254", 80},
		{"[2001:db8::1]", "", "2001:db8::1", 80},
		{"1.2.3.4.example", "1.2.3.4.example", "", 80},
	} {
		got, err := parseTarget(tc.in, 80)
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		var want netip.Addr
		if tc.addr != "" {
			want = netip.MustParseAddr(tc.addr)
		}
		if got.name != tc.name || got.addr != want || got.port != tc.port {
			t.Errorf("%s: got %+v", tc.in, got)
		}
	}
	for _, bad := range []string{"", "a..b", "host:0", "host:99999", "[fe80::1%eth0]", "ex ample.com", "256.256.256.256.256", "a.99999999999999999999999", "x.0xfff"} {
		if got, err := parseTarget(bad, 80); err == nil {
			t.Errorf("%q: accepted as %+v", bad, got)
		}
	}
}
