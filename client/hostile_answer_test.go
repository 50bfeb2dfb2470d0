package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/api/reins/executor/v1/executorv1connect"
	"github.com/reinsdev/reins/client"
)

// hugeStat is a modified executor whose Stat answers a path of 80 MiB.
type hugeStat struct {
	executorv1connect.UnimplementedExecutorHandler
}

func (hugeStat) Stat(ctx context.Context, req *connect.Request[executorv1.StatRequest]) (*connect.Response[executorv1.StatResponse], error) {
	return connect.NewResponse(&executorv1.StatResponse{Info: &executorv1.FileInfo{Path: "/" + strings.Repeat("a", 80<<20)}}), nil
}

// TestHostileExecutorAnswerBounded: an executor's answer is read up to a
// bound, not whatever size a modified executor sends: the service's MCP
// and E2B front ends call sandboxes through this client in the service's
// own memory.
func TestHostileExecutorAnswerBounded(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(executorv1connect.NewExecutorHandler(hugeStat{}))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()
	c := client.New(srv.URL, "tok")
	defer c.Close()
	sb := c.Sandbox("0123456789ab")
	resp, err := client.Unary(context.Background(), sb, sb.RPC().Stat, &executorv1.StatRequest{Path: "/x"})
	if err == nil {
		t.Fatalf("an answer of %d bytes was read whole", len(resp.Info.Path))
	}
	t.Logf("refused: %v", err)
}
