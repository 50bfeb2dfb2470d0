package server_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/reinsdev/reins/api"
	"github.com/reinsdev/reins/store"
)

// TestOpenAPIServed: GET /openapi.json answers the checked-in document
// without a token; no other method is served there, and the exemption
// from the token is that path's alone.
func TestOpenAPIServed(t *testing.T) {
	e := newEnv(t, store.Quota{}, nil)
	resp, err := http.Get(e.url + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || !bytes.Equal(body, api.OpenAPI) || len(body) < 1000 {
		t.Errorf("GET /openapi.json: %d %s, %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
	}
	resp, err = http.Post(e.url+"/openapi.json", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == 200 {
		t.Errorf("POST /openapi.json: %d", resp.StatusCode)
	}
	for _, p := range []string{"/openapi.json/x", "/openapi.jsonx", "/reins.v1.SandboxService/List"} {
		resp, err := http.Post(e.url+p, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without a token: %d, want 401", p, resp.StatusCode)
		}
	}
}
