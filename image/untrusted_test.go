package image

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

// TestPublicAddresses: a tenant's pull connects to public addresses only.
func TestPublicAddresses(t *testing.T) {
	for addr, want := range map[string]bool{
		"8.8.8.8": true, "2606:4700::1111": true, "151.101.1.69": true,
		"127.0.0.1": false, "127.9.9.9": false, "::1": false, "10.1.2.3": false, "172.16.0.1": false,
		"192.168.1.1": false, "169.254.169.254": false, "100.64.0.1": false, "0.0.0.0": false,
		"fe80::1": false, "fc00::1": false, "::ffff:127.0.0.1": false, "::ffff:10.0.0.1": false,
		"224.0.0.1": false, "255.255.255.255": false, "198.18.0.1": false, "64:ff9b::7f00:1": false,
	} {
		if got := public(netip.MustParseAddr(addr)); got != want {
			t.Errorf("public(%s) = %v, want %v", addr, got, want)
		}
	}
}

// TestUntrustedPullDialsNoPrivateAddress (from the red-team review): a
// tenant's image on a loopback registry, or on a public-looking name that
// redirects to loopback, is refused without a request reaching the
// loopback server; the operator's own pull of it works.
func TestUntrustedPullDialsNoPrivateAddress(t *testing.T) {
	reg := newTestRegistry(t)
	ref := reg.push(t, "test/img:v1", testImage(t))
	s := newStore(t)
	before, _ := reg.count()
	_, err := s.Resolve(Untrusted(context.Background()), ref, nil)
	if !errors.Is(err, ErrPrivateAddress) {
		t.Fatalf("a tenant's pull from %s: %v, want refused", ref, err)
	}
	if after, _ := reg.count(); after != before {
		t.Errorf("the loopback registry got %d requests from a tenant's pull", after-before)
	}
	if strings.Contains(err.Error(), "lookup") {
		t.Errorf("the error shows the resolver: %v", err)
	}
	// A redirect into loopback from a registry the tenant names: the
	// redirect's connection is refused the same way.
	hit := false
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hit = true }))
	defer internal.Close()
	if _, err := publicDial(context.Background(), "tcp", strings.TrimPrefix(internal.URL, "http://")); !errors.Is(err, ErrPrivateAddress) {
		t.Errorf("dial of %s for a tenant: %v, want refused", internal.URL, err)
	}
	if hit {
		t.Error("the internal server got a request")
	}
	if _, err := s.Resolve(context.Background(), ref, nil); err != nil {
		t.Errorf("the operator's pull of %s: %v", ref, err)
	}
}

// TestUntrustedPullSkipsTheOperatorsCache: an image the operator pulled
// (with credentials of its own, say) is not handed to a tenant from the
// cache: the tenant's pull asks the registry itself, anonymously, and here
// (a loopback registry) is refused.
func TestUntrustedPullSkipsTheOperatorsCache(t *testing.T) {
	reg := newTestRegistry(t)
	ref := reg.push(t, "private/img:v1", testImage(t))
	s := newStore(t)
	img, err := s.Resolve(context.Background(), ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{ref, reg.host + "/private/img@" + img.Digest} {
		if _, err := s.Resolve(Untrusted(context.Background()), r, nil); !errors.Is(err, ErrPrivateAddress) {
			t.Errorf("a tenant's pull of the operator's cached %s: %v, want refused", r, err)
		}
	}
}
