package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/server"
	"github.com/reinsdev/reins/server/mcp"
)

// mcpBench: tool calls through MCP's streamable HTTP transport at /mcp
// (the go-sdk's client; each call a JSON-RPC POST, the tool then an API
// call of the service to itself) beside the same work through the API's
// own unary calls from the Go client: what the MCP layer costs. exec
// `true` round trips, and a 1 MiB file written inline (base64 upload)
// against the raw file PUT.
func (b *bench) mcpBench(n int) error {
	rec, _, remove, err := b.busybox1()
	if err != nil {
		return err
	}
	defer remove()
	var url string
	h := mcp.NewHTTP(mcp.HTTPConfig{
		Client: func(token string) *client.Client { return client.New(url, token) },
		Tenant: server.RequestTenant,
	})
	srv := httptest.NewUnstartedServer(server.New(server.Over(b.m), "t", nil).WithHandler("/mcp", h).Handler())
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()
	url = srv.URL
	api := client.New(url, "t")
	defer api.Close()
	sb := api.Sandbox(rec.ID)
	tr := &sdk.StreamableClientTransport{Endpoint: url + "/mcp", DisableStandaloneSSE: true,
		HTTPClient: &http.Client{Transport: benchBearer{http.DefaultTransport}}}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, nil).Connect(b.ctx, tr, nil)
	if err != nil {
		return err
	}
	defer cs.Close()
	call := func(name string, args map[string]any) error {
		r, err := cs.CallTool(b.ctx, &sdk.CallToolParams{Name: name, Arguments: args})
		if err == nil && r.IsError {
			err = fmt.Errorf("%s: %v", name, r.Content)
		}
		return err
	}
	var viaMCP, viaAPI []time.Duration
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := call("exec", map[string]any{"sandbox_id": rec.ID, "command": "true"}); err != nil {
			return err
		}
		viaMCP = append(viaMCP, time.Since(t0))
		t0 = time.Now()
		if resp, err := sb.RunCommand(b.ctx, &reinsv1.RunCommandRequest{Command: "true"}); err != nil || resp.ExitCode != 0 {
			return fmt.Errorf("RunCommand: %v %v", resp, err)
		}
		viaAPI = append(viaAPI, time.Since(t0))
	}
	b.add("exec `true` through MCP at /mcp, go-sdk client (p50)", ms(pct(viaMCP, 50)),
		ms(pct(viaAPI, 50))+" RunCommand through the API", ratio(pct(viaMCP, 50), pct(viaAPI, 50)), "")
	data := make([]byte, 1<<20)
	b64 := base64.StdEncoding.EncodeToString(data)
	var upMCP, upRaw []time.Duration
	for i := 0; i < max(n/10, 5); i++ {
		t0 := time.Now()
		if err := call("upload", map[string]any{"sandbox_id": rec.ID, "path": "/workspace/m", "content_base64": b64, "overwrite": true}); err != nil {
			return err
		}
		upMCP = append(upMCP, time.Since(t0))
		t0 = time.Now()
		if err := sb.WriteRaw(b.ctx, "/workspace/r", bytes.NewReader(data), int64(len(data))); err != nil {
			return err
		}
		upRaw = append(upRaw, time.Since(t0))
	}
	b.add("1 MiB file written through MCP (base64 upload) (p50)", ms(pct(upMCP, 50)),
		ms(pct(upRaw, 50))+" raw file PUT", ratio(pct(upMCP, 50), pct(upRaw, 50)), "")
	return nil
}

type benchBearer struct{ rt http.RoundTripper }

func (b benchBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer t")
	return b.rt.RoundTrip(r)
}
