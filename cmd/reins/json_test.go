package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestShowJSONIsTheAPIs: `sandbox show --json` prints, byte for byte once
// compacted, the sandbox the API answers a JSON caller (curl) for Get:
// one shape, numbers where they fit, the RFC 3339 times beside the
// nanoseconds.
func TestShowJSONIsTheAPIs(t *testing.T) {
	f := serveFake(t)
	f.info.CreatedAt = time.Unix(1796137448, 678000123)
	f.info.ExpiresAt = f.info.CreatedAt.Add(time.Hour)
	f.info.Spec.Limits.MemoryBytes = 512 << 20
	f.info.Spec.Labels = map[string]string{"team": "a", "b": "c"}
	f.info.PeakMemoryBytes = 1 << 60
	f.info.OOMKills = 2
	out, err := runCLI(t, "show", "--json", "sbx1")
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", os.Getenv("REINS_URL")+"/reins.v1.SandboxService/Get", strings.NewReader(`{"id":"sbx1"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var api struct {
		Sandbox json.RawMessage `json:"sandbox"`
	}
	if err := json.Unmarshal(body, &api); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %v: %s", resp.StatusCode, err, body)
	}
	var cli bytes.Buffer
	if err := json.Compact(&cli, []byte(out)); err != nil {
		t.Fatalf("show --json is not JSON: %v\n%s", err, out)
	}
	if cli.String() != string(api.Sandbox) {
		t.Errorf("show --json is not the API's sandbox:\ncli %s\napi %s", cli.String(), api.Sandbox)
	}
	for _, want := range []string{`"created_unix_nano":"1796137448678000123","created_time":"2026-12-01T15:04:08.678000123Z"`,
		`"stopped_unix_nano":0,"stopped_time":""`, `"memory_bytes":536870912`, `"peak_memory_bytes":"1152921504606846976"`,
		`"labels":{"b":"c","team":"a"}`, `"oom_kills":2`, `"state":"SANDBOX_STATE_RUNNING"`} {
		if !strings.Contains(cli.String(), want) {
			t.Errorf("show --json lacks %s:\n%s", want, cli.String())
		}
	}
}
