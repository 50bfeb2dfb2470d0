package e2b_test

import (
	"net/http"
	"strings"
	"testing"
)

// A call reins does not implement is a 501 in E2B's shape naming it,
// whatever its method, never a 404 page nor the mux's 405.
func TestUnimplementedNamesTheCall(t *testing.T) {
	e := newEnv(t, nil)
	tok := e.tenant("acme")
	for _, rt := range [][2]string{{"POST", "/sandboxes/abc/snapshots"}, {"GET", "/templates"}, {"PATCH", "/sandboxes/abc"},
		{"PUT", "/sandboxes"}, {"POST", "/sandboxes/abc/fork"}, {"GET", "/v3/anything/at/all"}} {
		msg := e.call(rt[0], rt[1], nil, "X-API-KEY", tok).e2bError(t, http.StatusNotImplemented)
		if !strings.Contains(msg, "reins does not implement the E2B call "+rt[0]+" "+rt[1]) {
			t.Errorf("%s %s: %q", rt[0], rt[1], msg)
		}
	}
}

// The list's parameters are checked, in words; a stopped sandbox is not
// listed and is not found.
func TestListQuery(t *testing.T) {
	e := newEnv(t, map[string]string{"acme0sandbox": "acme"})
	tok := e.tenant("acme")
	for q, want := range map[string]string{
		"limit=0": "limit", "limit=101": "limit", "state=gone": "state", "order=up": "order",
		"startedAfter=yesterday": "startedAfter", "nextToken=forged": "nextToken", "metadata=a%25zz": "metadata",
	} {
		msg := e.call("GET", "/v2/sandboxes?"+q, nil, "X-API-KEY", tok).e2bError(t, http.StatusBadRequest)
		if !strings.HasPrefix(msg, want) {
			t.Errorf("%s: %q", q, msg)
		}
	}
	for _, path := range []string{"/v2/sandboxes", "/sandboxes", "/v2/sandboxes?metadata=app%3Dx&state=running,paused"} {
		if a := e.call("GET", path, nil, "X-API-KEY", tok); a.code != http.StatusOK || a.body != "[]\n" {
			t.Errorf("%s: %d %s, want the stopped sandbox left out", path, a.code, a.body)
		}
	}
	msg := e.call("GET", "/sandboxes/acme0sandbox", nil, "X-API-KEY", tok).e2bError(t, http.StatusNotFound)
	if !strings.Contains(msg, "it stopped (exited: it ended)") {
		t.Errorf("a stopped sandbox: %q", msg)
	}
}
