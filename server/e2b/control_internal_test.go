package e2b

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
)

// The API key's forms: a reins token as it is, with e2b_ before it, and
// e2b_ with its hex digits (what the SDKs' key check accepts).
func TestAPIKeyForms(t *testing.T) {
	tok := "reins_" + strings.Repeat("ab", 32)
	for in, want := range map[string]string{
		tok:                                    tok,
		"e2b_" + tok:                           tok,
		"e2b_" + strings.Repeat("ab", 32):      tok,
		"  " + tok + " ":                       tok,
		"e2b_XYZ":                              "e2b_XYZ", // no token: the API refuses it
		"e2b_" + strings.Repeat("a", maxKey+1): "",
		"":                                     "",
	} {
		r, _ := http.NewRequest("GET", "/", nil)
		r.Header.Set(APIKeyHeader, in)
		if got := apiKey(r); got != want {
			t.Errorf("key %.20q: %.20q, want %.20q", in, got, want)
		}
	}
}

// A token sealed by one handler opens in another with the same key (a
// restarted service), for the sandbox and token it was made for.
func TestEnvdTokenSurvivesRestart(t *testing.T) {
	key := []byte(strings.Repeat("k", 32))
	tok := newEnvdTokens(key).seal("abc123", "reins_t")
	id, token, ok := newEnvdTokens(key).open(tok)
	if !ok || id != "abc123" || token != "reins_t" {
		t.Fatalf("open after a restart: %q %q %v", id, token, ok)
	}
	if a, b := newEnvdTokens(key).seal("x", "y"), newEnvdTokens(key).seal("x", "y"); a == b {
		t.Error("two seals of the same pair are equal: the nonce is not fresh")
	}
}

// E2B's network options onto reins' modes.
func TestNetworkMapping(t *testing.T) {
	no, yes := false, true
	cases := []struct {
		internet *bool
		n        *networkConfig
		mode     reinsv1.NetworkMode
		hosts    []string
		cidrs    []string
	}{
		{nil, nil, reinsv1.NetworkMode_NETWORK_MODE_OPEN, nil, nil},
		{&yes, nil, reinsv1.NetworkMode_NETWORK_MODE_OPEN, nil, nil},
		{&no, nil, reinsv1.NetworkMode_NETWORK_MODE_EGRESS, nil, nil},
		{nil, &networkConfig{AllowOut: []string{"example.com"}}, reinsv1.NetworkMode_NETWORK_MODE_OPEN, nil, nil},
		{nil, &networkConfig{DenyOut: []string{"0.0.0.0/0"}}, reinsv1.NetworkMode_NETWORK_MODE_EGRESS, nil, nil},
		{nil, &networkConfig{DenyOut: []string{"0.0.0.0/0"}, AllowOut: []string{"*.github.com", "8.8.8.8", "1.1.1.0/24"}},
			reinsv1.NetworkMode_NETWORK_MODE_EGRESS, []string{"*.github.com"}, []string{"8.8.8.8", "1.1.1.0/24"}},
		{&no, &networkConfig{AllowOut: []string{"pypi.org"}}, reinsv1.NetworkMode_NETWORK_MODE_EGRESS, []string{"pypi.org"}, nil},
	}
	for i, c := range cases {
		n, err := networkOf(c.internet, c.n)
		if err != nil || n.Mode != c.mode || !slices.Equal(n.AllowHosts, c.hosts) || !slices.Equal(n.AllowCidrs, c.cidrs) {
			t.Errorf("case %d: %v %v", i, n, err)
		}
	}
	for _, n := range []*networkConfig{{DenyOut: []string{"10.0.0.0/8"}}, {Rules: rawJSON(`{"a":[]}`)}, {EgressProxy: rawJSON(`{"address":"x:1"}`)}} {
		if _, err := networkOf(nil, n); err == nil {
			t.Errorf("%+v: accepted", n)
		}
	}
}
