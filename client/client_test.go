package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/errdefs"
)

// TestNobodyListening: a call to an address where no service listens says
// the service is not running and how to start it, for unary and streaming
// calls alike.
func TestNobodyListening(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close() // the port is now closed: a dial is refused
	c := client.New(url, "token")
	defer c.Close()
	ctx := context.Background()
	_, unary := c.Get(ctx, "sb_x")
	_, stream := c.Create(ctx, nil, nil)
	for name, err := range map[string]error{"Get": unary, "Create": stream} {
		if !errors.Is(err, errdefs.ErrUnavailable) {
			t.Errorf("%s: %v, want an unavailable error", name, err)
		}
		if err == nil || !strings.Contains(err.Error(), "is it running?") || !strings.Contains(err.Error(), url) {
			t.Errorf("%s: %v, want advice to start reins serve at %s", name, err, url)
		}
	}
}
