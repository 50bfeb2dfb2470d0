package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/manager"
	"github.com/reinsdev/reins/server/wire"
	"github.com/reinsdev/reins/store"
	"github.com/reinsdev/reins/store/sqlite"
)

// fakeNetworks records the rules the API hands on, and answers with the
// sandbox as the manager has it, those rules in its spec.
type fakeNetworks struct {
	m     *manager.Manager
	mu    sync.Mutex
	calls []egress.Rules
}

func (f *fakeNetworks) SetNetwork(ctx context.Context, tenant, id string, rules egress.Rules) (sandbox.Info, error) {
	info, err := f.m.Get(ctx, tenant, id)
	if err != nil {
		return sandbox.Info{}, err
	}
	f.mu.Lock()
	f.calls = append(f.calls, rules)
	f.mu.Unlock()
	info.Spec.Network = rules
	return info, nil
}

func (f *fakeNetworks) last() []egress.Rules {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]egress.Rules(nil), f.calls...)
}

// fakeEgress serves the real SQLite store's egress log, and wakes
// waiters when the test appends or removes a sandbox.
type fakeEgress struct {
	st      *sqlite.Store
	mu      sync.Mutex
	changed chan struct{}
	removed map[string]bool
}

func newFakeEgress(st *sqlite.Store) *fakeEgress {
	return &fakeEgress{st: st, changed: make(chan struct{}), removed: map[string]bool{}}
}

func (f *fakeEgress) Egress(ctx context.Context, tenant, id string, after int64, limit int) ([]store.EgressRecord, error) {
	return f.st.ListEgress(ctx, tenant, id, after, limit)
}

func (f *fakeEgress) Wait(ctx context.Context, id string, after int64) error {
	for {
		f.mu.Lock()
		changed, removed := f.changed, f.removed[id]
		f.mu.Unlock()
		recs, err := f.st.ListEgress(ctx, "", id, after, 1)
		if err != nil || len(recs) > 0 {
			return err
		}
		if removed {
			return errdefs.ErrNotFound
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (f *fakeEgress) wake(remove string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if remove != "" {
		f.removed[remove] = true
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeEgress) append(t *testing.T, tenant string, entries ...egress.Entry) {
	t.Helper()
	if err := f.st.AppendEgress(context.Background(), tenant, entries); err != nil {
		t.Fatal(err)
	}
	f.wake("")
}

var rulesCmp = []cmp.Option{cmpopts.EquateComparable(netip.Prefix{}), cmpopts.EquateEmpty()}

// TestNetworkBadInputRefused: rules that do not parse, or that a tenant
// may not give, are refused at the API's edge with the egress package's
// words, before a sandbox or a run is made.
func TestNetworkBadInputRefused(t *testing.T) {
	e := newEnv(t, store.Quota{}, nil)
	ctx := context.Background()
	acme := e.client(e.tenant(t, "acme", nil))
	admin := e.client(adminToken)
	for _, tc := range []struct {
		net  *reinsv1.Network
		kind error
		want string
	}{
		{&reinsv1.Network{AllowHosts: []string{"exa mple.com"}}, errdefs.ErrInvalidArgument, "want a DNS name"},
		{&reinsv1.Network{AllowHosts: []string{"example.com:65536"}}, errdefs.ErrInvalidArgument, "from 1 to 65535"},
		{&reinsv1.Network{AllowCidrs: []string{"10.0.0.0/40"}}, errdefs.ErrInvalidArgument, "want an address prefix"},
		{&reinsv1.Network{Secrets: []*reinsv1.SecretBinding{{Name: "TOKEN"}}}, errdefs.ErrInvalidArgument, "bound to no host"},
		{&reinsv1.Network{AllowCidrs: []string{"10.1.0.0/16"}}, errdefs.ErrPermissionDenied, "only the admin"},
		{&reinsv1.Network{AllowCidrs: []string{"0.0.0.0/0"}}, errdefs.ErrPermissionDenied, "only the admin"},
	} {
		_, err := acme.Create(ctx, &reinsv1.SandboxSpec{Network: tc.net}, nil)
		if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Create with %v: %v, want %v saying %q", tc.net, err, tc.kind, tc.want)
		}
		_, err = acme.StartRun(ctx, &reinsv1.RunSpec{Task: "x", Model: "script:hi", Network: tc.net})
		if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("StartRun with %v: %v, want %v saying %q", tc.net, err, tc.kind, tc.want)
		}
	}
	if sbs, _ := acme.List(ctx, nil); len(sbs) != 0 {
		t.Errorf("refused creates left sandboxes: %v", sbs)
	}
	if runs, _ := acme.ListRuns(ctx, nil); len(runs) != 0 {
		t.Errorf("refused starts left runs: %v", runs)
	}
	// The admin may allow a private prefix: its create goes past the
	// rules (and fails later, on this test's missing images).
	_, err := admin.Create(ctx, &reinsv1.SandboxSpec{Network: &reinsv1.Network{AllowCidrs: []string{"10.1.0.0/16"}}}, nil)
	if err == nil || errors.Is(err, errdefs.ErrPermissionDenied) || strings.Contains(err.Error(), "cidr") {
		t.Errorf("the admin's create with a private prefix: %v, want it past the rules", err)
	}
}

// TestRunNetwork: a run's rules reach its spec normalized.
func TestRunNetwork(t *testing.T) {
	e := newEnv(t, store.Quota{}, nil)
	ctx := context.Background()
	acme := e.client(e.tenant(t, "acme", nil))
	run, err := acme.StartRun(ctx, &reinsv1.RunSpec{Task: "say hi", Model: "script:hi", Network: &reinsv1.Network{
		AllowHosts: []string{"PyPI.org", "*.github.com", "pypi.org"}, Secrets: []*reinsv1.SecretBinding{{Name: "GH", Hosts: []string{"API.github.com"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := wire.NetworkFromProto(run.Spec.Network)
	want := egress.Rules{Mode: egress.ModeEgress, AllowHosts: []egress.HostRule{{Host: "*.github.com"}, {Host: "pypi.org"}},
		Secrets: []egress.SecretRef{{Name: "GH", Hosts: []string{"api.github.com"}}}}
	if err != nil || !cmp.Equal(got, want, rulesCmp...) {
		t.Errorf("the run's network: %v %s", err, cmp.Diff(want, got, rulesCmp...))
	}
}

// TestUpdateNetwork: the lists an update names replace the sandbox's,
// the others stay, and the whole result is normalized before the
// boundary gets it.
func TestUpdateNetwork(t *testing.T) {
	const sbx = "a1a1a1a1a1a1"
	start := egress.Rules{Mode: egress.ModeEgress, AllowHosts: []egress.HostRule{{Host: "old.example.com"}},
		DenyHosts:  []egress.HostRule{{Host: "bad.example.com"}},
		AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}, // the admin's, for this tenant
		Secrets:    []egress.SecretRef{{Name: "GH", Hosts: []string{"api.github.com"}}}}
	e := newEnvSeeds(t, store.Quota{}, []seed{{id: sbx, tenant: "acme", spec: sandbox.Spec{Network: start}}})
	ctx := context.Background()
	acme := e.client(e.tenant(t, "acme", nil))

	sb, err := acme.UpdateNetwork(ctx, &reinsv1.UpdateNetworkRequest{Id: sbx,
		AllowHosts: &reinsv1.StringList{Items: []string{"Pypi.org:443", "*.npmjs.org"}}})
	if err != nil {
		t.Fatal(err)
	}
	want := start
	want.AllowHosts = []egress.HostRule{{Host: "*.npmjs.org"}, {Host: "pypi.org", Port: 443}}
	calls := e.nets.last()
	if len(calls) != 1 || !cmp.Equal(calls[0], want, rulesCmp...) {
		t.Fatalf("the boundary got %v, want %v", calls, want)
	}
	if got, _ := wire.NetworkFromProto(sb.Spec.Network); !cmp.Equal(got, want, rulesCmp...) {
		t.Errorf("the answer: %s", cmp.Diff(want, got, rulesCmp...))
	}

	// An empty list empties; a mode changes alone.
	if _, err := acme.UpdateNetwork(ctx, &reinsv1.UpdateNetworkRequest{Id: sbx, Mode: reinsv1.NetworkMode_NETWORK_MODE_OPEN,
		DenyHosts: &reinsv1.StringList{}}); err != nil {
		t.Fatal(err)
	}
	want2 := start
	want2.Mode, want2.DenyHosts = egress.ModeOpen, nil
	if calls := e.nets.last(); len(calls) != 2 || !cmp.Equal(calls[1], want2, rulesCmp...) {
		t.Errorf("mode and an emptied list: %v", calls)
	}

	for _, tc := range []struct {
		req  *reinsv1.UpdateNetworkRequest
		kind error
		want string
	}{
		{&reinsv1.UpdateNetworkRequest{AllowHosts: &reinsv1.StringList{Items: []string{"a..b"}}}, errdefs.ErrInvalidArgument, "want a DNS name"},
		{&reinsv1.UpdateNetworkRequest{AllowCidrs: &reinsv1.StringList{Items: []string{"nope"}}}, errdefs.ErrInvalidArgument, "want an address prefix"},
		{&reinsv1.UpdateNetworkRequest{AllowCidrs: &reinsv1.StringList{Items: []string{"10.9.0.0/16"}}}, errdefs.ErrPermissionDenied, "only the admin"},
		{&reinsv1.UpdateNetworkRequest{Mode: reinsv1.NetworkMode_NETWORK_MODE_NONE}, errdefs.ErrInvalidArgument, "secrets cannot be used"},
		{&reinsv1.UpdateNetworkRequest{Mode: reinsv1.NetworkMode(7)}, errdefs.ErrInvalidArgument, "want none, egress or open"},
		{&reinsv1.UpdateNetworkRequest{Secrets: &reinsv1.SecretBindings{Items: []*reinsv1.SecretBinding{{Name: "X"}}}}, errdefs.ErrInvalidArgument, "bound to no host"},
	} {
		tc.req.Id = sbx
		_, err := acme.UpdateNetwork(ctx, tc.req)
		if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("UpdateNetwork %v: %v, want %v saying %q", tc.req, err, tc.kind, tc.want)
		}
	}
	if calls := e.nets.last(); len(calls) != 2 {
		t.Errorf("refused updates reached the boundary: %v", calls[2:])
	}
}

func egressEntry(sb string, n int) egress.Entry {
	return egress.Entry{Time: time.Unix(1700000000+int64(n), 0).UTC(), Sandbox: sb, Proto: "tls", Host: "pypi.org", Port: 443,
		Addr: "151.101.0.223:443", Allowed: n%2 == 0, Rule: "allow-host pypi.org", BytesOut: int64(n), BytesIn: 10 * int64(n)}
}

// TestEgressLogStream: the log from after_seq, then with follow the
// entries as they come, until the sandbox is removed.
func TestEgressLogStream(t *testing.T) {
	const sbx = "b2b2b2b2b2b2"
	e := newEnv(t, store.Quota{}, map[string]string{sbx: "acme"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	acme := e.client(e.tenant(t, "acme", nil))
	e.egress.append(t, "acme", egressEntry(sbx, 1), egressEntry(sbx, 2), egressEntry(sbx, 3))

	var got []*reinsv1.EgressLogEntry
	collect := func(en *reinsv1.EgressLogEntry) error { got = append(got, en); return nil }
	if err := acme.EgressLog(ctx, sbx, 1, false, collect); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Seq != 2 || got[1].Seq != 3 || got[1].Host != "pypi.org" || got[1].BytesIn != 30 {
		t.Fatalf("after seq 1: %v", got)
	}

	seen := make(chan *reinsv1.EgressLogEntry, 10)
	done := make(chan error, 1)
	go func() {
		done <- acme.EgressLog(ctx, sbx, 0, true, func(en *reinsv1.EgressLogEntry) error { seen <- en; return nil })
	}()
	next := func() *reinsv1.EgressLogEntry {
		select {
		case en := <-seen:
			return en
		case err := <-done:
			t.Fatalf("the stream ended early: %v", err)
		case <-ctx.Done():
			t.Fatal("no entry came")
		}
		return nil
	}
	for want := int64(1); want <= 3; want++ {
		if en := next(); en.Seq != want {
			t.Fatalf("entry %d, want %d", en.Seq, want)
		}
	}
	e.egress.append(t, "acme", egressEntry(sbx, 4))
	if en := next(); en.Seq != 4 || en.Allowed != true {
		t.Fatalf("a new entry: %v", en)
	}
	e.egress.wake(sbx) // removed
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the stream of a removed sandbox ended with %v, want its end", err)
		}
	case <-ctx.Done():
		t.Fatal("the stream did not end when its sandbox was removed")
	}
}

// TestUpdateNetworkJSON: a JSON caller (curl) empties a list with
// {"items": []} and leaves out what it keeps; the answer is the API's
// JSON, enums by name.
func TestUpdateNetworkJSON(t *testing.T) {
	const sbx = "c3c3c3c3c3c3"
	start := egress.Rules{Mode: egress.ModeEgress, AllowHosts: []egress.HostRule{{Host: "keep.example.com"}},
		DenyHosts: []egress.HostRule{{Host: "bad.example.com"}}}
	e := newEnvSeeds(t, store.Quota{}, []seed{{id: sbx, tenant: "acme", spec: sandbox.Spec{Network: start}}})
	tok := e.tenant(t, "acme", nil)
	req, _ := http.NewRequest("POST", e.url+"/reins.v1.SandboxService/UpdateNetwork",
		strings.NewReader(`{"id":"`+sbx+`","mode":"NETWORK_MODE_OPEN","deny_hosts":{"items":[]}}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: bearer(tok)}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got struct {
		Sandbox struct {
			Spec struct {
				Network map[string]any `json:"network"`
			} `json:"spec"`
		} `json:"sandbox"`
	}
	if err := json.Unmarshal(body, &got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("HTTP %d: %v: %s", resp.StatusCode, err, body)
	}
	want := map[string]any{"mode": "NETWORK_MODE_OPEN", "allow_hosts": []any{"keep.example.com"}, "deny_hosts": []any{},
		"allow_cidrs": []any{}, "secrets": []any{}}
	if d := cmp.Diff(want, got.Sandbox.Spec.Network); d != "" {
		t.Errorf("the answer's network (-want +got):\n%s", d)
	}
}
