package e2b_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox/template"
	"github.com/reinsdev/reins/server/e2b"
)

// A missing or wrong API key is answered 401 in E2B's shape on every
// route, before anything else about the request is looked at (a body too
// big, a call reins does not implement); a good key in each of its forms
// gets past.
func TestHostileBadKey(t *testing.T) {
	e := newEnv(t, nil)
	tok := e.tenant("acme")
	routes := [][2]string{
		{"POST", "/sandboxes"}, {"POST", "/v2/sandboxes"}, {"GET", "/sandboxes"}, {"GET", "/v2/sandboxes"},
		{"GET", "/sandboxes/abc"}, {"DELETE", "/sandboxes/abc"}, {"POST", "/sandboxes/abc/timeout"},
		{"POST", "/sandboxes/abc/pause"}, {"POST", "/sandboxes/abc/resume"}, {"POST", "/sandboxes/abc/connect"},
		{"POST", "/v2/sandboxes/abc/connect"}, {"GET", "/sandboxes/abc/metrics"}, {"GET", "/templates"},
		{"PUT", "/sandboxes/abc/network"}, {"POST", "/sandboxes/abc/snapshots"}, {"GET", "/no/such/call"},
	}
	keys := map[string][]string{
		"missing":          nil,
		"empty":            {"X-API-KEY", ""},
		"wrong":            {"X-API-KEY", "reins_" + strings.Repeat("0", 64)},
		"wrong e2b_ form":  {"X-API-KEY", "e2b_" + strings.Repeat("0", 64)},
		"not a token":      {"X-API-KEY", "hello"},
		"huge":             {"X-API-KEY", "e2b_" + strings.Repeat("a", 64<<10)},
		"the admin's, cut": {"X-API-KEY", adminToken[:20]},
		"bearer wrong":     {"Authorization", "Bearer reins_nope"},
	}
	for name, hdr := range keys {
		for _, rt := range routes {
			a := e.call(rt[0], rt[1], bytes.NewReader(make([]byte, 2<<20)), hdr...)
			msg := a.e2bError(t, http.StatusUnauthorized)
			if !strings.Contains(msg, "API key") {
				t.Errorf("%s key, %s %s: %q does not say what to send", name, rt[0], rt[1], msg)
			}
		}
	}
	for _, k := range []string{tok, "e2b_" + tok, "e2b_" + strings.TrimPrefix(tok, "reins_")} {
		if a := e.call("GET", "/v2/sandboxes", nil, "X-API-KEY", k); a.code != http.StatusOK {
			t.Errorf("key %s...: %d %s, want 200", k[:10], a.code, a.body)
		}
	}
	if a := e.call("GET", "/v2/sandboxes", nil, "Authorization", "Bearer "+tok); a.code != http.StatusOK {
		t.Errorf("bearer: %d %s, want 200", a.code, a.body)
	}
}

// Another tenant's sandbox is answered exactly as a missing one on every
// route that names a sandbox, control plane and data plane alike; its
// owner's own answers say it stopped.
func TestHostileOtherTenantsSandbox(t *testing.T) {
	e := newEnv(t, map[string]string{"acme0sandbox": "acme"})
	e.tenant("acme")
	evil := e.tenant("evil")
	routes := [][3]string{
		{"GET", "/sandboxes/%s", ""}, {"DELETE", "/sandboxes/%s", ""}, {"POST", "/sandboxes/%s/timeout", `{"timeout":30}`},
		{"POST", "/sandboxes/%s/pause", `{}`}, {"POST", "/sandboxes/%s/resume", `{"timeout":30}`},
		{"POST", "/sandboxes/%s/connect", `{"timeout":30}`}, {"POST", "/v2/sandboxes/%s/connect", `{"timeout":30}`},
		{"GET", "/sandboxes/%s/metrics", ""}, {"PUT", "/sandboxes/%s/network", `{"allow_internet_access":false}`},
	}
	for _, rt := range routes {
		theirs := e.call(rt[0], strings.Replace(rt[1], "%s", "acme0sandbox", 1), strings.NewReader(rt[2]), "X-API-KEY", evil)
		missing := e.call(rt[0], strings.Replace(rt[1], "%s", "nosuch0sandb", 1), strings.NewReader(rt[2]), "X-API-KEY", evil)
		got := strings.ReplaceAll(theirs.e2bError(t, http.StatusNotFound), "acme0sandbox", "ID")
		want := strings.ReplaceAll(missing.e2bError(t, http.StatusNotFound), "nosuch0sandb", "ID")
		if got != want {
			t.Errorf("%s %s: another tenant's sandbox: %q; a missing one: %q", rt[0], rt[1], got, want)
		}
	}
	// The list shows none of it.
	if a := e.call("GET", "/v2/sandboxes?state=running,paused", nil, "X-API-KEY", evil); a.body != "[]\n" {
		t.Errorf("evil's list: %s", a.body)
	}
	// The data plane: evil's key, or an access token of evil's for
	// another sandbox, finds nothing; acme's token for its sandbox works
	// as far as the sandbox's state.
	acmeTok := e.tenants["acme"]
	for name, hdr := range map[string][2]string{
		"evil's key":                  {e2b.APIKeyHeader, evil},
		"evil's token of its sandbox": {e2b.AccessTokenHeader, e.h.Seal("evil0sandbox", evil)},
		"acme's token of another id":  {e2b.AccessTokenHeader, e.h.Seal("other0sandbx", acmeTok)},
	} {
		r, _ := http.NewRequest("GET", "/health", nil)
		r.Header.Set(e2b.SandboxIDHeader, "acme0sandbox")
		r.Header.Set(hdr[0], hdr[1])
		_, err := e.h.SandboxClientOf(r)
		if e2b.Status(err) != http.StatusNotFound || !strings.Contains(err.Error(), "sandbox acme0sandbox not found: list yours") {
			t.Errorf("data plane, %s: %v (%d), want a missing sandbox's 404", name, err, e2b.Status(err))
		}
	}
	r, _ := http.NewRequest("GET", "/health", nil)
	r.Header.Set(e2b.SandboxIDHeader, "acme0sandbox")
	r.Header.Set(e2b.AccessTokenHeader, e.h.Seal("acme0sandbox", acmeTok))
	if _, err := e.h.SandboxClientOf(r); e2b.Status(err) != http.StatusNotFound || !strings.Contains(err.Error(), "it stopped (exited") {
		t.Errorf("data plane, acme's own stopped sandbox: %v, want 404 saying it stopped", err)
	}
}

// The data plane refuses a missing, forged, truncated or huge access
// token as unauthenticated, and a token sealed with another service's key.
func TestHostileAccessToken(t *testing.T) {
	e := newEnv(t, map[string]string{"acme0sandbox": "acme"})
	acme := e.tenant("acme")
	other := newEnv(t, nil)
	good := e.h.Seal("acme0sandbox", acme)
	for name, tok := range map[string]string{
		"missing":           "",
		"garbage":           "reins_envd_AAAA",
		"truncated":         good[:len(good)-4],
		"flipped":           good[:len(good)-1] + map[bool]string{true: "A", false: "B"}[good[len(good)-1] != 'A'],
		"huge":              "reins_envd_" + strings.Repeat("A", 1<<20),
		"another service's": other.h.Seal("acme0sandbox", acme),
		"the key itself":    acme,
	} {
		r, _ := http.NewRequest("GET", "/health", nil)
		r.Header.Set(e2b.SandboxIDHeader, "acme0sandbox")
		if tok != "" {
			r.Header.Set(e2b.AccessTokenHeader, tok)
		}
		if _, err := e.h.SandboxClientOf(r); !errorsIs(err, errdefs.ErrUnauthenticated) || e2b.Status(err) != http.StatusUnauthorized {
			t.Errorf("%s token: %v, want 401", name, err)
		}
	}
}

// A body over 1 MiB is refused as too large before it is read whole; one
// that is not JSON, or JSON of the wrong shape, is a 400 saying so.
func TestHostileBodies(t *testing.T) {
	e := newEnv(t, nil)
	tok := e.tenant("acme")
	huge := `{"templateID":"base","metadata":{"k":"` + strings.Repeat("x", 4<<20) + `"}}`
	for _, path := range []string{"/v2/sandboxes", "/sandboxes", "/sandboxes/abc/timeout", "/sandboxes/abc/connect"} {
		msg := e.call("POST", path, strings.NewReader(huge), "X-API-KEY", tok).e2bError(t, http.StatusRequestEntityTooLarge)
		if !strings.Contains(msg, "over 1024 KiB") {
			t.Errorf("%s: %q", path, msg)
		}
	}
	for _, body := range []string{`{`, `[1,2]`, `{"templateID": 5}`, `{"metadata": "x"}`, `{"envVars": {"A": 1}}`} {
		msg := e.call("POST", "/v2/sandboxes", strings.NewReader(body), "X-API-KEY", tok).e2bError(t, http.StatusBadRequest)
		if !strings.Contains(msg, "not the JSON") {
			t.Errorf("%s: %q", body, msg)
		}
	}
}

// Metadata with keys or values too big, empty, with control characters,
// not UTF-8, or in reins' own namespaces is refused with words naming the
// metadata, before any sandbox is made.
func TestHostileMetadata(t *testing.T) {
	e := newEnv(t, nil)
	tok := e.tenant("acme")
	many := map[string]string{}
	for i := range 40 {
		many[strings.Repeat("k", i+1)] = "v"
	}
	for name, md := range map[string]map[string]string{
		"huge key":      {strings.Repeat("k", 10<<10): "v"},
		"huge value":    {"k": strings.Repeat("v", 10<<10)},
		"empty key":     {"": "v"},
		"NUL key":       {"a\x00b": "v"},
		"newline key":   {"a\nb": "v"},
		"control value": {"k": "a\x1bb"},
		"e2b's own":     {"e2b.template": "desktop"},
		"reins' own":    {"reins.pool": "busybox"},
		"too many":      many,
	} {
		body, _ := jsonMarshal(map[string]any{"templateID": "base", "metadata": md})
		msg := e.call("POST", "/v2/sandboxes", bytes.NewReader(body), "X-API-KEY", tok).e2bError(t, http.StatusBadRequest)
		if !strings.Contains(msg, "metadata") {
			t.Errorf("%s: %q does not name the metadata", name, msg)
		}
	}
	// The list's filter is bounded too.
	msg := e.call("GET", "/v2/sandboxes?metadata="+strings.Repeat("a", 20<<10), nil, "X-API-KEY", tok).e2bError(t, http.StatusBadRequest)
	if !strings.Contains(msg, "metadata") {
		t.Errorf("a huge filter: %q", msg)
	}
}

// A templateID that names a host path, an image reference or another
// tenant's template is refused; another tenant's template is answered as
// a missing one.
func TestHostileTemplateID(t *testing.T) {
	e := newEnv(t, nil)
	e.tenant("acme")
	evil := e.tenant("evil")
	if err := e.templates.Put(template.Template{Tenant: "acme", Name: "secret-web", From: "busybox", Snapshot: "sha256:" + strings.Repeat("ab", 32)}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"oci:/var/lib/reins/images", "docker-archive:/etc/shadow.tar", "/etc/passwd", "../../etc", "script:/x.json",
		"template:secret-web", "snapshot:base", "docker.io/library/alpine:3", "Base", "base\x00", strings.Repeat("a", 100)} {
		body, _ := jsonMarshal(map[string]any{"templateID": id})
		msg := e.call("POST", "/v2/sandboxes", bytes.NewReader(body), "X-API-KEY", evil).e2bError(t, http.StatusBadRequest)
		if !strings.Contains(msg, "templateID") || strings.Contains(msg, "/var/lib") && id != "oci:/var/lib/reins/images" {
			t.Errorf("templateID %q: %q", id, msg)
		}
	}
	theirs := e.call("POST", "/v2/sandboxes", strings.NewReader(`{"templateID":"secret-web"}`), "X-API-KEY", evil).e2bError(t, http.StatusNotFound)
	missing := e.call("POST", "/v2/sandboxes", strings.NewReader(`{"templateID":"nosuch-webx"}`), "X-API-KEY", evil).e2bError(t, http.StatusNotFound)
	if strings.Replace(theirs, "secret-web", "X", 1) != strings.Replace(missing, "nosuch-webx", "X", 1) {
		t.Errorf("another tenant's template: %q; a missing one: %q", theirs, missing)
	}
}

// A timeout that is negative, zero, fractional, a string or beyond any
// int is refused with the range reins takes, at create and at set.
func TestHostileTimeout(t *testing.T) {
	e := newEnv(t, map[string]string{"acme0sandbox": "acme"})
	tok := e.tenant("acme")
	for _, v := range []string{"-1", "0", "1.5", `"30"`, "1e30", "99999999999999999999999", "31536001", "true", "[]"} {
		msg := e.call("POST", "/v2/sandboxes", strings.NewReader(`{"templateID":"base","timeout":`+v+`}`), "X-API-KEY", tok).e2bError(t, http.StatusBadRequest)
		if !strings.Contains(msg, "timeout") || !strings.Contains(msg, "1 to 31536000") {
			t.Errorf("create, timeout %s: %q", v, msg)
		}
		msg = e.call("POST", "/sandboxes/acme0sandbox/timeout", strings.NewReader(`{"timeout":`+v+`}`), "X-API-KEY", tok).e2bError(t, http.StatusBadRequest)
		if !strings.Contains(msg, "1 to 31536000") {
			t.Errorf("set, timeout %s: %q", v, msg)
		}
	}
	msg := e.call("POST", "/sandboxes/acme0sandbox/timeout", strings.NewReader(`{}`), "X-API-KEY", tok).e2bError(t, http.StatusBadRequest)
	if !strings.Contains(msg, "timeout is missing") {
		t.Errorf("set without a timeout: %q", msg)
	}
}
