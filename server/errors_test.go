package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	"connectrpc.com/connect"

	"github.com/reinsdev/reins/agent"
	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/api/reins/v1/reinsv1connect"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox/manager"
	"github.com/reinsdev/reins/server"
	"github.com/reinsdev/reins/store"
	"github.com/reinsdev/reins/store/sqlite"
)

// failing answers with err where the test needs an error from deep in the
// service: ListTenants (a unary call), and the second page of a run's
// events (the end of a stream that has sent a page).
type failing struct {
	*sqlite.Store // a store.Store and a store.Tenants
	err           error
}

func (f *failing) ListTenants(context.Context) ([]store.Tenant, error) { return nil, f.err }

func (f *failing) GetRun(_ context.Context, _, id string) (store.Run, error) {
	return store.Run{ID: id, Status: "running"}, nil
}

func (f *failing) Events(_ context.Context, id string, after int64, _ int) ([]store.Event, error) {
	if after > 0 {
		return nil, f.err
	}
	evs := make([]store.Event, 500) // a full page: the handler reads on at once
	for i := range evs {
		evs[i] = store.Event{RunID: id, Seq: int64(i) + 1, Type: "note", Data: json.RawMessage(`{}`)}
	}
	return evs, nil
}

// TestErrorsReachTheWire: a handler's error reaches a real client once
// translated, with its kind's code, its message, and no host path, from
// a unary call and at the end of a stream alike; an error that already is
// a Connect error passes unchanged.
func TestErrorsReachTheWire(t *testing.T) {
	st, blobs := openStores(t, t.TempDir())
	f := &failing{Store: st}
	eng, err := agent.New(agent.Config{Store: f, Blobs: blobs, Models: scriptModels, Sandboxes: manager.Runs{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	srv := httptest.NewServer(server.New(nil, adminToken, slog.New(slog.DiscardHandler)).WithTenants(&server.Tenants{Store: f}).
		WithRuns(&server.Runs{Engine: eng, Store: f}).Handler())
	t.Cleanup(srv.Close)
	hc := &http.Client{Transport: bearer(adminToken)}
	tenants := reinsv1connect.NewTenantServiceClient(hc, srv.URL)
	runs := reinsv1connect.NewRunServiceClient(hc, srv.URL)

	const secret = "/var/lib/reins-test-secret"
	opErr := &net.OpError{Op: "dial", Net: "unix", Addr: &net.UnixAddr{Name: secret + "/sb_1/executor.sock", Net: "unix"},
		Err: &net.OpError{Op: "connect", Err: syscall.ECONNREFUSED}}
	for _, tc := range []struct {
		name string
		err  error
		code connect.Code
		kind string
		msg  string // the whole message the caller reads
	}{
		{"kinded", fmt.Errorf("tenant acme: %w", errdefs.ErrNotFound),
			connect.CodeNotFound, "not_found", "tenant acme"},
		{"no kind", fmt.Errorf("reading the tenants: %w", &fs.PathError{Op: "open", Path: secret + "/reins.db", Err: syscall.EIO}),
			connect.CodeInternal, "internal", "reading the tenants: open (a path on the host): input/output error"},
		{"kinded, with a socket", fmt.Errorf("sandbox sb_1: its executor did not answer (%w): %w", opErr, errdefs.ErrUnavailable),
			connect.CodeUnavailable, "unavailable", "sandbox sb_1: its executor did not answer (dial unix (a path on the host): connect: connection refused)"},
		{"already a Connect error", connect.NewError(connect.CodeAborted, errors.New("the executor says no")),
			connect.CodeAborted, "", "the executor says no"},
	} {
		f.err = tc.err
		check := func(call string, err error) {
			t.Helper()
			var ce *connect.Error
			if !errors.As(err, &ce) {
				t.Fatalf("%s, %s: %v, want a Connect error", tc.name, call, err)
			}
			if ce.Code() != tc.code || ce.Message() != tc.msg || ce.Meta().Get(errdefs.KindHeader) != tc.kind {
				t.Errorf("%s, %s: code %v kind %q message %q; want %v %q %q", tc.name, call,
					ce.Code(), ce.Meta().Get(errdefs.KindHeader), ce.Message(), tc.code, tc.kind, tc.msg)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%s, %s: the host path reached the caller: %v", tc.name, call, err)
			}
		}
		_, err := tenants.List(context.Background(), connect.NewRequest(&reinsv1.ListTenantsRequest{}))
		check("unary", err)

		stream, err := runs.Events(context.Background(), connect.NewRequest(&reinsv1.RunEventsRequest{Id: "run_x"}))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for stream.Receive() {
			n++
		}
		stream.Close()
		if n != 500 {
			t.Errorf("%s: the stream sent %d events before its error, want 500", tc.name, n)
		}
		check("end of stream", stream.Err())
	}
}
