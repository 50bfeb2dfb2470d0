package server_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/reinsdev/reins/store"
)

// Another tenant's token on a sandbox's view gets what a missing
// sandbox gets: not found, the same words.
func TestViewTenants(t *testing.T) {
	e := newEnv(t, store.Quota{}, map[string]string{"a1": "acme"})
	acme, beta := e.tenant(t, "acme", nil), e.tenant(t, "beta", nil)
	get := func(path, token string) (int, string) {
		req, _ := http.NewRequest("GET", e.url+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/view/a1/state", acme); code != 200 {
		t.Errorf("acme's view of its sandbox: %d %s", code, body)
	}
	for _, p := range []string{"/view/a1/state", "/view/a1/frames"} {
		code, body := get(p, beta)
		mcode, mbody := get("/view/zz9/state", beta)
		if code != http.StatusNotFound || code != mcode || len(body) == 0 {
			t.Errorf("beta's %s: %d %s; a missing sandbox: %d %s", p, code, body, mcode, mbody)
		}
	}
	if code, _ := get("/view/a1/takeover", beta); code != http.StatusNotFound {
		t.Errorf("beta's take-over page of acme's sandbox: %d", code)
	}
}
