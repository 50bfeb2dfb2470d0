package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/server"
	"github.com/reinsdev/reins/server/wire"
	"github.com/reinsdev/reins/server/wire/wiretest"
	"github.com/reinsdev/reins/store"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name (rewritten with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if d := cmp.Diff(string(want), got); d != "" {
		t.Errorf("%s (-want +got):\n%s", name, d)
	}
}

func parseNetwork(t *testing.T, withSecrets bool, args ...string) *networkFlags {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	n := addNetworkFlags(fs, withSecrets)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return n
}

// TestNetworkFlags: the flags become the spec's rules; what the egress
// package refuses is a usage error in its words.
func TestNetworkFlags(t *testing.T) {
	n := parseNetwork(t, true, "--network", "open", "--allow-host", "API.github.com:443", "--allow-host", "*.pypi.org",
		"--deny-host", "evil.example.com", "--allow-cidr", "203.0.113.0/24", "--allow-cidr", "2001:db8::/32",
		"--secret", "GITHUB_TOKEN=api.github.com,*.github.com")
	got, err := n.spec()
	if err != nil {
		t.Fatal(err)
	}
	want := &reinsv1.Network{Mode: reinsv1.NetworkMode_NETWORK_MODE_OPEN, AllowHosts: []string{"api.github.com:443", "*.pypi.org"},
		DenyHosts: []string{"evil.example.com"}, AllowCidrs: []string{"203.0.113.0/24", "2001:db8::/32"},
		Secrets: []*reinsv1.SecretBinding{{Name: "GITHUB_TOKEN", Hosts: []string{"api.github.com", "*.github.com"}}}}
	if !proto.Equal(got, want) {
		t.Errorf("spec:\n got %v\nwant %v", got, want)
	}
	if got, err := parseNetwork(t, true).spec(); got != nil || err != nil {
		t.Errorf("no flags: %v, %v; want no network (the service's default)", got, err)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--allow-host", "exa mple.com"}, "--allow-host: host \"exa mple.com\": want a DNS name"},
		{[]string{"--allow-host", "example.com:0"}, "the port must be a number from 1 to 65535"},
		{[]string{"--deny-host", "example.com:65536"}, "the port must be a number from 1 to 65535"},
		{[]string{"--allow-host", "10.0.0.1"}, "allow it with --allow-cidr 10.0.0.1/32"},
		{[]string{"--allow-cidr", "10.0.0.0/33"}, "--allow-cidr: cidr \"10.0.0.0/33\": want an address prefix"},
		{[]string{"--secret", "TOKEN"}, "--secret: secret \"TOKEN\": want NAME=HOST[,HOST...]"},
		{[]string{"--secret", "TOKEN="}, "want NAME=HOST[,HOST...]"},
		{[]string{"--secret", "TOKEN=api.github.com:443"}, "a secret is bound to a host name, without a port"},
		{[]string{"--secret", "1TOKEN=x.com"}, "secret name \"1TOKEN\""},
		{[]string{"--network", "closed"}, "--network: network mode \"closed\": want none, egress or open"},
		{[]string{"--network", "none", "--secret", "T=x.com"}, "--network none has no way out"},
	} {
		_, err := parseNetwork(t, true, tc.args...).spec()
		var ue usageError
		if !errors.As(err, &ue) || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want a usage error saying %q", tc.args, err, tc.want)
		}
	}
}

// TestNetworkUpdateFlags: the lists named replace, the others stay
// unset; an empty value empties a list.
func TestNetworkUpdateFlags(t *testing.T) {
	req, err := parseNetwork(t, false, "--allow-host", "a.example.com", "--allow-host", "b.example.com:8080", "--deny-host", "").update("sbx1")
	if err != nil {
		t.Fatal(err)
	}
	want := &reinsv1.UpdateNetworkRequest{Id: "sbx1", AllowHosts: &reinsv1.StringList{Items: []string{"a.example.com", "b.example.com:8080"}},
		DenyHosts: &reinsv1.StringList{}}
	if !proto.Equal(req, want) {
		t.Errorf("update:\n got %v\nwant %v", req, want)
	}
	req, err = parseNetwork(t, false, "--network", "open").update("sbx1")
	if err != nil || !proto.Equal(req, &reinsv1.UpdateNetworkRequest{Id: "sbx1", Mode: reinsv1.NetworkMode_NETWORK_MODE_OPEN}) {
		t.Errorf("mode alone: %v, %v", req, err)
	}
	if _, err := parseNetwork(t, false).update("sbx1"); err == nil || !strings.Contains(err.Error(), "nothing to change") {
		t.Errorf("no flags: %v", err)
	}
	if _, err := parseNetwork(t, false, "--allow-cidr", "x").update("sbx1"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a bad cidr: %v", err)
	}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	addNetworkFlags(fs, false)
	if fs.Lookup("secret") != nil {
		t.Error("sandbox network takes --secret: a running sandbox's environment cannot change")
	}
}

// sampleEntries are egress log entries of each kind the table shows.
func sampleEntries() []*reinsv1.EgressLogEntry {
	at := time.Date(2026, 12, 1, 15, 4, 5, 678000000, time.UTC)
	return []*reinsv1.EgressLogEntry{
		wire.EgressEntry(store.EgressRecord{Seq: 1, Entry: egress.Entry{Time: at, Sandbox: "sbx1", Proto: "dns", Host: "pypi.org",
			Allowed: true, Rule: "allow-host *.pypi.org"}}),
		wire.EgressEntry(store.EgressRecord{Seq: 2, Entry: egress.Entry{Time: at.Add(time.Second), Sandbox: "sbx1", Proto: "tls", Host: "files.pypi.org",
			Port: 443, Addr: "151.101.0.223:443", Allowed: true, Rule: "allow-host *.pypi.org", BytesOut: 812, BytesIn: 4_812_345,
			Duration: 2 * time.Second}}),
		wire.EgressEntry(store.EgressRecord{Seq: 3, Entry: egress.Entry{Time: at.Add(2 * time.Second), Sandbox: "sbx1", Proto: "https",
			Host: "api.github.com", Port: 443, Addr: "140.82.112.6:443", Allowed: true, Rule: "allow-host api.github.com:443",
			BytesOut: 1300, BytesIn: 52000, Note: "secret GITHUB_TOKEN injected"}}),
		wire.EgressEntry(store.EgressRecord{Seq: 4, Entry: egress.Entry{Time: at.Add(3 * time.Second), Sandbox: "sbx1", Proto: "http",
			Host: "evil.example.com", Port: 80, Allowed: false, Rule: "not in the allowlist"}}),
		wire.EgressEntry(store.EgressRecord{Seq: 5, Entry: egress.Entry{Time: at.Add(4 * time.Second), Sandbox: "sbx1", Proto: "tcp",
			Port: 22, Addr: "169.254.169.254:22", Rule: "reserved address 169.254.169.254 (link-local, cloud metadata)"}}),
	}
}

// TestRenderNetwork: `sandbox show`'s network lines and the egress
// table, against golden files.
func TestRenderNetwork(t *testing.T) {
	inUTC(t)

	var out bytes.Buffer
	w := tabwriter.NewWriter(&out, 0, 0, 2, ' ', 0)
	printNetwork(w, wire.Network(wiretest.Network()))
	w.Flush()
	out.WriteString("--- the default\n")
	w = tabwriter.NewWriter(&out, 0, 0, 2, ' ', 0)
	printNetwork(w, nil)
	w.Flush()
	golden(t, "network.golden", out.String())

	out.Reset()
	out.WriteString(egressHeader)
	for _, en := range sampleEntries() {
		out.WriteString(egressLine(en))
	}
	golden(t, "egress.golden", out.String())
}

func inUTC(t *testing.T) {
	old := egressZone
	egressZone = time.UTC
	t.Cleanup(func() { egressZone = old })
}

// fakeSandboxes is the one sandbox the CLI tests ask about; the server
// calls nothing else of it here.
type fakeSandboxes struct {
	server.Sandboxes
	info sandbox.Info
}

func (f *fakeSandboxes) Get(_ context.Context, _, id string) (sandbox.Info, error) {
	if id != f.info.ID {
		return sandbox.Info{}, errdefs.ErrNotFound
	}
	return f.info, nil
}

// fakeNetworks keeps the rules the API gives it.
type fakeNetworks struct{ f *fakeSandboxes }

func (n fakeNetworks) SetNetwork(_ context.Context, _, id string, rules egress.Rules) (sandbox.Info, error) {
	n.f.info.Spec.Network = rules
	return n.f.info, nil
}

// fakeEgress serves a fixed log; the sandbox is gone once it is read.
type fakeEgress struct{ entries []*reinsv1.EgressLogEntry }

func (e fakeEgress) Egress(_ context.Context, _, _ string, after int64, limit int) ([]store.EgressRecord, error) {
	var out []store.EgressRecord
	for _, en := range e.entries {
		if en.Seq > after && len(out) < limit {
			out = append(out, wire.EgressEntryFromProto(en))
		}
	}
	return out, nil
}

func (fakeEgress) Wait(context.Context, string, int64) error { return errdefs.ErrNotFound }

// serveFake starts the API over the fakes, with the CLI pointed at it.
func serveFake(t *testing.T) *fakeSandboxes {
	f := &fakeSandboxes{info: sandbox.Info{ID: "sbx1", State: sandbox.StateRunning, Spec: sandbox.Spec{Image: "busybox",
		Network: egress.Rules{Mode: egress.ModeEgress, AllowHosts: []egress.HostRule{{Host: "old.example.com"}},
			DenyHosts: []egress.HostRule{{Host: "evil.example.com"}}, Secrets: []egress.SecretRef{{Name: "GH", Hosts: []string{"api.github.com"}}}}}}}
	srv := httptest.NewUnstartedServer(server.New(f, "tok", nil).WithNetworks(fakeNetworks{f}).WithEgressLogs(fakeEgress{sampleEntries()}).Handler())
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	t.Setenv("REINS_URL", srv.URL)
	t.Setenv("REINS_TOKEN", "tok")
	return f
}

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	c := sandboxCmd()
	var out bytes.Buffer
	c.SetOut(&out)
	c.SetErr(&out)
	c.SetArgs(args)
	err := c.Execute()
	return out.String(), err
}

// TestNetworkCommand: `sandbox network` sends what it names, and prints
// the whole new rules the service answers.
func TestNetworkCommand(t *testing.T) {
	f := serveFake(t)
	out, err := runCLI(t, "network", "sbx1", "--allow-host", "PyPI.org", "--allow-host", "*.pypi.org", "--allow-cidr", "198.51.100.7")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "network_command.golden", out)
	if got := f.info.Spec.Network.DenyHosts; len(got) != 1 || got[0].Host != "evil.example.com" {
		t.Errorf("the denied hosts, not named, became %v", got)
	}
	if _, err := runCLI(t, "network", "sbx1", "--allow-host", "bad host"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a bad host: %v", err)
	}
	if _, err := runCLI(t, "network", "sbx9", "--allow-host", "x.com"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("an unknown sandbox: %v", err)
	}
}

// TestEgressCommand: the table, and --json one object per line in the
// API's JSON form.
func TestEgressCommand(t *testing.T) {
	inUTC(t)
	serveFake(t)
	out, err := runCLI(t, "egress", "sbx1", "--follow")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "egress.golden", out)
	out, err = runCLI(t, "egress", "sbx1", "--json", "--after", "3")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "egress_json.golden", out)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.Contains(lines[0], `"seq":4,`) {
		t.Errorf("--json --after 3: %q, want entries 4 and 5, one a line", out)
	}
}
