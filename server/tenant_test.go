package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/reinsdev/reins/agent"
	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/api/reins/v1/reinsv1connect"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/model/script"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/fake"
	"github.com/reinsdev/reins/sandbox/manager"
	"github.com/reinsdev/reins/sandbox/template"
	"github.com/reinsdev/reins/server"
	"github.com/reinsdev/reins/server/wire"
	"github.com/reinsdev/reins/store"
	"github.com/reinsdev/reins/store/blob"
	"github.com/reinsdev/reins/store/sqlite"
)

const adminToken = "reins_admin-token-of-this-test"

// env is a whole service over real transports: the API on an httptest
// server, a SQLite store, the agent engine with script models and a
// sandbox manager over the fake backend. Sandboxes cannot start here (no
// root, no images), so the sandboxes a test needs are stopped ones,
// recovered from records: seeded maps an id to its tenant.
type env struct {
	url    string
	st     *sqlite.Store
	t      *testing.T
	nets   *fakeNetworks
	egress *fakeEgress
	// templates holds the tenants' template records.
	templates *template.Store
}

// openStores opens a SQLite store and a blob store in dir, closed when
// the test ends.
func openStores(t *testing.T, dir string) (*sqlite.Store, *blob.Store) {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(dir, "reins.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	blobs, err := blob.Open(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	return st, blobs
}

func newEnv(t *testing.T, defaults store.Quota, seeded map[string]string) *env {
	t.Helper()
	var seeds []seed
	for id, tenant := range seeded {
		seeds = append(seeds, seed{id: id, tenant: tenant})
	}
	return newEnvSeeds(t, defaults, seeds)
}

// seed is a stopped sandbox recovered from its record; a zero spec is a
// busybox on the fake backend.
type seed struct {
	id, tenant string
	spec       sandbox.Spec
}

func newEnvSeeds(t *testing.T, defaults store.Quota, seeds []seed) *env {
	t.Helper()
	dir := t.TempDir()
	st, blobs := openStores(t, dir)
	tenants := &server.Tenants{Store: st, Defaults: defaults}

	exe := filepath.Join(dir, "reins-executor")
	os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755)
	sbDir := filepath.Join(dir, "sandboxes")
	for _, sd := range seeds {
		id, spec := sd.id, sd.spec
		spec.Backend, spec.Image = "fake", "busybox"
		rec, _ := json.Marshal(manager.Record{Version: 1, Info: sandbox.Info{ID: id, Tenant: sd.tenant, State: sandbox.StateStopped,
			Reason: sandbox.ReasonExited, Message: "it ended", Spec: spec, CreatedAt: time.Now()}})
		os.MkdirAll(filepath.Join(sbDir, id), 0o700)
		if err := os.WriteFile(filepath.Join(sbDir, id, "sandbox.json"), rec, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	m, err := manager.New(manager.Config{
		Dir: sbDir, ExecutorPath: exe, DiskPool: -1,
		Backends: map[string]sandbox.Backend{"fake": fake.New()}, DefaultBackend: "fake",
		Images: noImages{}, MaxSandboxes: tenants.MaxSandboxes,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	eng, err := agent.New(agent.Config{
		Store: st, Blobs: blobs, Models: scriptModels, CheckImage: server.CheckImage,
		Sandboxes: manager.Runs{M: m, TenantOf: func(ctx context.Context, runID string) (string, error) {
			run, err := st.GetRun(ctx, "", runID)
			return run.Tenant, err
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)

	nets, eg := &fakeNetworks{m: m}, newFakeEgress(st)
	templates, err := template.NewStore(filepath.Join(dir, "templates"))
	if err != nil {
		t.Fatal(err)
	}
	m.UseTemplates(templates)
	srv := httptest.NewUnstartedServer(server.New(server.Over(m), adminToken, nil).WithTenants(tenants).
		WithTemplates(&template.Builder{Store: templates}).
		WithRuns(&server.Runs{Engine: eng, Store: st, DefaultModel: "script:hi"}).
		WithNetworks(nets).WithExpiries(m).WithPausers(m).WithSuspender(m).WithSnapshots(m).WithEgressLogs(eg).WithHolds(m).
		WithPorts(&server.Ports{Domain: "localhost", Key: make([]byte, 32)}).Handler())
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return &env{url: srv.URL, st: st, t: t, nets: nets, egress: eg, templates: templates}
}

type noImages struct{}

func (noImages) Resolve(context.Context, string, func(sandbox.Progress)) (manager.Image, error) {
	return manager.Image{}, errors.New("no images in this test")
}

// scriptModels opens "script:hi" (says hi) and "script:ask" (asks a human,
// so the run waits).
func scriptModels(ms agent.ModelSpec) (model.Model, string, error) {
	spec := ms.Model
	var turns []script.Turn
	switch spec {
	case "script:hi":
		turns = []script.Turn{{Text: "hi"}}
	case "script:ask":
		turns = []script.Turn{{ToolCalls: []script.ToolCall{{Name: "ask_human", Input: json.RawMessage(`{"question":"go on?"}`)}}}, {Text: "done"}}
	default:
		return nil, "", fmt.Errorf("no model %q here: %w", spec, errdefs.ErrInvalidArgument)
	}
	m, err := script.New(turns)
	return m, spec, err
}

func (e *env) client(token string) *client.Client {
	c := client.New(e.url, token)
	e.t.Cleanup(c.Close)
	return c
}

// tenant creates a tenant with a quota and returns its new token.
func (e *env) tenant(t *testing.T, name string, q *reinsv1.Quota) string {
	t.Helper()
	ctx := context.Background()
	admin := e.client(adminToken)
	if _, err := admin.CreateTenant(ctx, name, q); err != nil {
		t.Fatal(err)
	}
	tok, _, err := admin.TenantToken(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, "reins_") || len(tok) != len("reins_")+64 {
		t.Fatalf("token %q: want reins_ and 64 hex digits", tok)
	}
	return tok
}

// rawRuns is the generated run client, to reach every method with token.
func (e *env) rawRuns(token string) reinsv1connect.RunServiceClient {
	return reinsv1connect.NewRunServiceClient(&http.Client{Transport: bearer(token)}, e.url)
}

type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// proxyCall sends an executor call for sandbox id through the service as
// Connect JSON, and returns the service's error. The service answers it
// before forwarding, so the method's request type does not matter.
func (e *env) proxyCall(token, procedure, id string) error {
	req, _ := http.NewRequest("POST", e.url+procedure, strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(server.SandboxHeader, id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct{ Code, Message string }
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, &body); err != nil || body.Code == "" {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, data)
	}
	var code connect.Code
	if err := code.UnmarshalText([]byte(body.Code)); err != nil {
		return err
	}
	ce := connect.NewError(code, errors.New(body.Message))
	ce.Meta().Set(errdefs.KindHeader, resp.Header.Get(errdefs.KindHeader))
	return errdefs.FromConnect(ce)
}

func wantKind(t *testing.T, what string, err, kind error) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Errorf("%s: %v, want %v", what, err, kind)
	}
}

func waitStatus(t *testing.T, c *client.Client, id string, want ...string) *reinsv1.Run {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		run, err := c.GetRun(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(want, string(wire.RunStatusFromProto(run.Status))) {
			return run
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is %s, want %v", id, run.Status, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAuth(t *testing.T) {
	e := newEnv(t, store.Quota{}, nil)
	ctx := context.Background()
	acme := e.client(e.tenant(t, "acme", nil))
	if _, err := acme.ListRuns(ctx, nil); err != nil {
		t.Fatalf("a tenant's token: %v", err)
	}
	for _, tok := range []string{"", "reins_", "reins_0000", "nope", adminToken + "x", strings.TrimSuffix(adminToken, "t")} {
		_, err := e.client(tok).ListRuns(ctx, nil)
		wantKind(t, fmt.Sprintf("token %q", tok), err, errdefs.ErrUnauthenticated)
		if err != nil && !strings.Contains(err.Error(), "REINS_TOKEN") {
			t.Errorf("unauthenticated error %q does not say what to do", err)
		}
	}
	// No Authorization header at all, and another scheme.
	for _, h := range []string{"", "Basic " + adminToken} {
		req, _ := http.NewRequest("POST", e.url+"/"+reinsv1connect.RunServiceName+"/List", strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		if h != "" {
			req.Header.Set("Authorization", h)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("Authorization %q: HTTP %d, want 401", h, resp.StatusCode)
		}
	}
	// A new token revokes the old one.
	tok2, _, err := e.client(adminToken).TenantToken(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	_, err = acme.ListRuns(ctx, nil)
	wantKind(t, "a replaced token", err, errdefs.ErrUnauthenticated)
	if _, err := e.client(tok2).ListRuns(ctx, nil); err != nil {
		t.Errorf("the new token: %v", err)
	}
	// Only the hash is stored.
	if _, err := e.st.TenantByToken(ctx, tok2); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the store finds a tenant by the token itself: %v", err)
	}
	if tn, err := e.st.TenantByToken(ctx, server.HashToken(tok2)); err != nil || tn.Name != "acme" {
		t.Errorf("the store by the token's hash: %+v, %v", tn, err)
	}
	if resp, err := http.Get(e.url + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Errorf("healthz needs no token: %v %v", resp, err)
	}
}

func TestTenantAPI(t *testing.T) {
	e := newEnv(t, store.Quota{Sandboxes: 10, Runs: 5}, nil)
	ctx := context.Background()
	admin := e.client(adminToken)
	acme := e.client(e.tenant(t, "acme", &reinsv1.Quota{Sandboxes: 2, Runs: -1}))

	for _, bad := range []string{"", "Acme", "a_b", strings.Repeat("a", 41)} {
		_, err := admin.CreateTenant(ctx, bad, nil)
		wantKind(t, fmt.Sprintf("CreateTenant(%q)", bad), err, errdefs.ErrInvalidArgument)
	}
	_, err := admin.CreateTenant(ctx, "acme", nil)
	wantKind(t, "CreateTenant of a taken name", err, errdefs.ErrAlreadyExists)
	_, _, err = admin.TenantToken(ctx, "nope")
	wantKind(t, "TenantToken of an unknown tenant", err, errdefs.ErrNotFound)
	_, err = admin.SetTenantQuota(ctx, "nope", &reinsv1.Quota{Runs: 1})
	wantKind(t, "SetTenantQuota of an unknown tenant", err, errdefs.ErrNotFound)

	if _, err := admin.CreateTenant(ctx, "beta", nil); err != nil {
		t.Fatal(err)
	}
	list, err := admin.ListTenants(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("ListTenants: %v, %v", list, err)
	}
	a, b := list[0], list[1]
	if a.Name != "acme" || a.EffectiveQuota.Sandboxes != 2 || a.EffectiveQuota.Runs != -1 || a.TokenIssuedUnixNano == 0 {
		t.Errorf("acme: %v", a)
	}
	if b.Name != "beta" || b.Quota.Sandboxes != 0 || b.EffectiveQuota.Sandboxes != 10 || b.EffectiveQuota.Runs != 5 || b.TokenIssuedUnixNano != 0 {
		t.Errorf("beta: %v", b)
	}
	up, err := admin.SetTenantQuota(ctx, "beta", &reinsv1.Quota{Sandboxes: 1, Runs: -7})
	if err != nil || up.EffectiveQuota.Sandboxes != 1 || up.Quota.Runs != -1 || up.EffectiveQuota.Runs != -1 {
		t.Errorf("SetTenantQuota: %v, %v", up, err)
	}

	// A tenant's token manages nothing, whatever it names.
	denied := map[string]func() error{
		"Create":    func() error { _, err := acme.CreateTenant(ctx, "evil", nil); return err },
		"List":      func() error { _, err := acme.ListTenants(ctx); return err },
		"Token":     func() error { _, _, err := acme.TenantToken(ctx, "acme"); return err },
		"SetQuota":  func() error { _, err := acme.SetTenantQuota(ctx, "acme", &reinsv1.Quota{Sandboxes: -1}); return err },
		"SetPolicy": func() error { _, err := acme.SetTenantPolicy(ctx, "acme", ""); return err },
	}
	checkCovers(t, reinsv1.File_reins_v1_tenant_proto.Services().ByName("TenantService"), denied)
	for name, call := range denied {
		err := call()
		wantKind(t, "TenantService."+name+" with a tenant's token", err, errdefs.ErrPermissionDenied)
		if err != nil && !strings.Contains(err.Error(), "admin token") {
			t.Errorf("permission error %q does not say what is needed", err)
		}
	}
	if _, err := admin.CreateTenant(ctx, "evil", nil); err != nil {
		t.Errorf("a refused Create left a tenant behind: %v", err)
	}
}

// checkCovers fails unless calls has an entry for every method of svc, so
// that a method added later cannot skip the isolation test.
func checkCovers[F any](t *testing.T, svc protoreflect.ServiceDescriptor, calls map[string]F) {
	t.Helper()
	methods := svc.Methods()
	for i := range methods.Len() {
		if _, ok := calls[string(methods.Get(i).Name())]; !ok {
			t.Errorf("%s.%s is not in the isolation test: add it", svc.Name(), methods.Get(i).Name())
		}
	}
}

// TestIsolation calls every API method with tenant beta's token and acme's
// ids: each answers exactly as for an id that does not exist.
func TestIsolation(t *testing.T) {
	const sbx, adminSbx, missingSbx = "a0a0a0a0a0a0", "e0e0e0e0e0e0", "f0f0f0f0f0f0"
	e := newEnv(t, store.Quota{}, map[string]string{sbx: "acme", adminSbx: ""})
	ctx := context.Background()
	acme := e.client(e.tenant(t, "acme", nil))
	betaToken := e.tenant(t, "beta", nil)
	beta, rb := e.client(betaToken), e.rawRuns(betaToken)
	sc := reinsv1connect.NewSandboxServiceClient(&http.Client{Transport: bearer(betaToken)}, e.url)
	raw := func(err error) error { return errdefs.FromConnect(err) }

	run, err := acme.StartRun(ctx, &reinsv1.RunSpec{Task: "say hi", Model: "script:hi"})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, acme, run.Id, "succeeded")
	const missingRun = "run_00000000deadbeef"

	drain := func(s interface {
		Receive() bool
		Err() error
		Close() error
	}, err error) error {
		if err != nil {
			return err
		}
		defer s.Close()
		for s.Receive() {
		}
		return s.Err()
	}
	runCalls := map[string]func(id string) error{
		"Get": func(id string) error {
			_, err := rb.Get(ctx, connect.NewRequest(&reinsv1.GetRunRequest{Id: id}))
			return err
		},
		"Events": func(id string) error {
			return drain(rb.Events(ctx, connect.NewRequest(&reinsv1.RunEventsRequest{Id: id})))
		},
		"Cancel": func(id string) error {
			_, err := rb.Cancel(ctx, connect.NewRequest(&reinsv1.CancelRunRequest{Id: id}))
			return err
		},
		"Answer": func(id string) error {
			_, err := rb.Answer(ctx, connect.NewRequest(&reinsv1.AnswerRunRequest{Id: id, Text: "yes"}))
			return err
		},
		"Approve": func(id string) error {
			_, err := rb.Approve(ctx, connect.NewRequest(&reinsv1.ApproveRequest{Id: id}))
			return err
		},
		"Deny": func(id string) error {
			_, err := rb.Deny(ctx, connect.NewRequest(&reinsv1.DenyRequest{Id: id, Reason: "no"}))
			return err
		},
		"Pause": func(id string) error {
			_, err := rb.Pause(ctx, connect.NewRequest(&reinsv1.PauseRunRequest{Id: id}))
			return err
		},
		"Resume": func(id string) error {
			_, err := rb.Resume(ctx, connect.NewRequest(&reinsv1.ResumeRunRequest{Id: id}))
			return err
		},
		"Fork": func(id string) error {
			_, err := rb.Fork(ctx, connect.NewRequest(&reinsv1.ForkRunRequest{Id: id, AtSeq: 1}))
			return err
		},
		"Verify": func(id string) error {
			_, err := rb.Verify(ctx, connect.NewRequest(&reinsv1.VerifyRunRequest{Id: id}))
			return err
		},
		"Compare": func(id string) error {
			_, err := rb.Compare(ctx, connect.NewRequest(&reinsv1.CompareRunsRequest{Recorded: id, Replayed: id}))
			return err
		},
		"ListArtifacts": func(id string) error {
			_, err := rb.ListArtifacts(ctx, connect.NewRequest(&reinsv1.ListArtifactsRequest{Id: id}))
			return err
		},
		"GetArtifact": func(id string) error {
			return drain(rb.GetArtifact(ctx, connect.NewRequest(&reinsv1.GetArtifactRequest{Id: id, NameOrDigest: "out.txt"})))
		},
		"Start": nil, "List": nil, // below
	}
	checkCovers(t, reinsv1.File_reins_v1_run_proto.Services().ByName("RunService"), runCalls)
	for name, call := range runCalls {
		if call != nil {
			sameAsMissing(t, "RunService."+name, errdefs.FromConnect(call(run.Id)), errdefs.FromConnect(call(missingRun)), run.Id, missingRun)
		}
	}
	list, err := rb.List(ctx, connect.NewRequest(&reinsv1.ListRunsRequest{}))
	if err != nil || len(list.Msg.Runs) != 0 {
		t.Errorf("RunService.List with beta's token: %v, %v; want none", list, err)
	}
	// A run may not attach another tenant's sandbox.
	attach := func(id string) error {
		_, err := beta.StartRun(ctx, &reinsv1.RunSpec{Task: "x", Model: "script:hi",
			Sandboxes: map[string]string{"default": agent.AttachPrefix + id}})
		return err
	}
	sameAsMissing(t, "RunService.Start attaching a sandbox", attach(sbx), attach(missingSbx), sbx, missingSbx)
	if runs, _ := beta.ListRuns(ctx, nil); len(runs) != 0 {
		t.Errorf("a refused Start left runs: %v", runs)
	}

	// Sandboxes, and the executor proxy for every executor method.
	sbCalls := map[string]func(id string) error{
		"Get":    func(id string) error { _, err := beta.Get(ctx, id); return err },
		"Delete": func(id string) error { return beta.Delete(ctx, id) },
		"UpdateNetwork": func(id string) error {
			_, err := beta.UpdateNetwork(ctx, &reinsv1.UpdateNetworkRequest{Id: id, AllowHosts: &reinsv1.StringList{Items: []string{"x.example.com"}}})
			return err
		},
		"EgressLog": func(id string) error {
			return beta.EgressLog(ctx, id, 0, false, func(*reinsv1.EgressLogEntry) error { return errors.New("an entry of another tenant's") })
		},
		"PortURL": func(id string) error {
			_, err := beta.PortURL(ctx, id, 3000, true, 0)
			return err
		},
		"Extend": func(id string) error {
			_, err := beta.Extend(ctx, id, time.Hour)
			return err
		},
		"RunCommand": func(id string) error {
			_, err := sc.RunCommand(ctx, connect.NewRequest(&reinsv1.RunCommandRequest{SandboxId: id, Command: "true"}))
			return raw(err)
		},
		"Suspend": func(id string) error { _, err := beta.Suspend(ctx, id); return err },
		"Resume":  func(id string) error { _, err := beta.Resume(ctx, id); return err },
		"Snapshot": func(id string) error {
			_, err := beta.Snapshot(ctx, id, "snap")
			return err
		},
		"Fork": func(id string) error { _, err := beta.Fork(ctx, id, 1); return err },
		"Events": func(id string) error {
			return beta.Events(ctx, id, 0, false, func(*reinsv1.SandboxLifecycleEvent) error { return errors.New("an event of another tenant's") })
		},
		// A snapshot is named by its tenant's name: another tenant's is
		// missing (test/e2e TestTenantIsolation makes a real one).
		"DeleteSnapshot": func(id string) error { return beta.DeleteSnapshot(ctx, id) },
		"ListSnapshots":  nil, // below
		"Pause": func(id string) error {
			_, err := sc.Pause(ctx, connect.NewRequest(&reinsv1.PauseSandboxRequest{Id: id, OrSuspend: true}))
			return raw(err)
		},
		"ViewURL": func(id string) error {
			_, err := sc.ViewURL(ctx, connect.NewRequest(&reinsv1.ViewURLRequest{Id: id, Public: true}))
			return raw(err)
		},
		"TakeOver": func(id string) error {
			_, err := sc.TakeOver(ctx, connect.NewRequest(&reinsv1.TakeOverRequest{Id: id}))
			return raw(err)
		},
		// Templates are named, not sandboxes: below, by name.
		"BuildTemplate": nil, "ListTemplates": nil, "DeleteTemplate": nil,
		"Create": nil, "List": nil, // below; Create has no id
		"Version": nil, // below; it names no tenant's things
		// A built-in image is the same for every tenant; BuildImage names no tenant's things.
		"BuildImage": nil,
	}
	checkCovers(t, reinsv1.File_reins_v1_sandbox_proto.Services().ByName("SandboxService"), sbCalls)
	for name, call := range sbCalls {
		if call != nil {
			sameAsMissing(t, "SandboxService."+name, call(sbx), call(missingSbx), sbx, missingSbx)
		}
	}
	sbs, err := beta.List(ctx, nil)
	if err != nil || len(sbs) != 0 {
		t.Errorf("SandboxService.List with beta's token: %v, %v; want none", sbs, err)
	}
	if snaps, err := beta.ListSnapshots(ctx); err != nil || len(snaps) != 0 {
		t.Errorf("SandboxService.ListSnapshots with beta's token: %v, %v; want none", snaps, err)
	}
	// Any token may ask the version: the service's build and the
	// backends' runtimes, the same for every tenant.
	if v, err := beta.Version(ctx); err != nil || len(v.Backends) == 0 {
		t.Errorf("SandboxService.Version with beta's token: %v, %v", v, err)
	}
	ex := executorv1.File_reins_executor_v1_executor_proto.Services().Get(0)
	for i := range ex.Methods().Len() {
		procedure := "/" + string(ex.FullName()) + "/" + string(ex.Methods().Get(i).Name())
		call := func(id string) error { return e.proxyCall(betaToken, procedure, id) }
		sameAsMissing(t, "executor "+procedure, call(sbx), call(missingSbx), sbx, missingSbx)
	}
	_, err = client.Unary(ctx, beta.Sandbox(sbx), beta.Sandbox(sbx).RPC().Stat, &executorv1.StatRequest{Path: "/"})
	wantKind(t, "Stat through the client with beta's token", err, errdefs.ErrNotFound)
	_, err = beta.Sandbox(sbx).Computer(ctx, &executorv1.ComputerRequest{Action: "screenshot"})
	wantKind(t, "Computer through the client with beta's token", err, errdefs.ErrNotFound)
	// The raw file routes beside the API (rawfile.go).
	rawCalls := map[string]func(id string) error{
		"GET /v1/sandboxes/{id}/files": func(id string) error {
			r, err := beta.Sandbox(id).ReadRaw(ctx, "/etc/hostname")
			if err == nil {
				r.Close()
			}
			return err
		},
		"PUT /v1/sandboxes/{id}/files": func(id string) error {
			return beta.Sandbox(id).WriteRaw(ctx, "/tmp/x", strings.NewReader("x"), 1)
		},
	}
	for name, call := range rawCalls {
		sameAsMissing(t, name, call(sbx), call(missingSbx), sbx, missingSbx)
	}

	// Templates: another tenant's is answered as a missing one, by
	// every call that names one, and never listed.
	const acmeTpl, missingTpl = "acmeweb", "nosuchweb"
	if err := e.templates.Put(template.Template{Tenant: "acme", Name: acmeTpl, From: "busybox", Snapshot: "sha256:" + strings.Repeat("ab", 32)}); err != nil {
		t.Fatal(err)
	}
	tplCalls := map[string]func(name string) error{
		"DeleteTemplate": func(name string) error { return beta.DeleteTemplate(ctx, name) },
		"Create from it": func(name string) error {
			_, err := beta.Create(ctx, &reinsv1.SandboxSpec{Image: template.Prefix + name}, nil)
			return err
		},
		"BuildTemplate from it": func(name string) error {
			_, err := beta.BuildTemplate(ctx, &reinsv1.BuildTemplateRequest{Name: "mine", From: template.Prefix + name}, nil)
			return err
		},
	}
	for what, call := range tplCalls {
		sameAsMissing(t, "SandboxService."+what, call(acmeTpl), call(missingTpl), acmeTpl, missingTpl)
	}
	if ts, err := beta.ListTemplates(ctx); err != nil || len(ts) != 0 {
		t.Errorf("SandboxService.ListTemplates with beta's token: %v, %v; want none", ts, err)
	}
	if ts, err := acme.ListTemplates(ctx); err != nil || len(ts) != 1 || ts[0].Name != acmeTpl {
		t.Errorf("acme's ListTemplates: %v, %v; want its one", ts, err)
	}

	// acme still sees its own; the admin sees everything.
	for name, c := range map[string]*client.Client{"acme": acme, "admin": e.client(adminToken)} {
		if _, err := c.GetRun(ctx, run.Id); err != nil {
			t.Errorf("%s's GetRun of acme's run: %v", name, err)
		}
		if sb, err := c.Get(ctx, sbx); err != nil || sb.State != reinsv1.SandboxState_SANDBOX_STATE_STOPPED {
			t.Errorf("%s's Get of acme's sandbox: %v, %v", name, sb, err)
		}
		_, err = client.Unary(ctx, c.Sandbox(sbx), c.Sandbox(sbx).RPC().Stat, &executorv1.StatRequest{Path: "/"})
		wantKind(t, name+"'s Stat of acme's stopped sandbox", err, errdefs.ErrFailedPrecondition)
	}
	if runs, _ := acme.ListRuns(ctx, nil); len(runs) != 1 {
		t.Errorf("acme's ListRuns: %d runs, want its 1", len(runs))
	}
	if sbs, _ := acme.List(ctx, nil); len(sbs) != 1 || sbs[0].Id != sbx {
		t.Errorf("acme's List: %v, want only its sandbox", sbs)
	}
	if sbs, _ := e.client(adminToken).List(ctx, nil); len(sbs) != 2 {
		t.Errorf("the admin's List: %d sandboxes, want 2", len(sbs))
	}
	// A tenant cannot reach the admin's sandboxes either.
	sameAsMissing(t, "acme's Get of the admin's sandbox",
		func() error { _, err := acme.Get(ctx, adminSbx); return err }(),
		func() error { _, err := acme.Get(ctx, missingSbx); return err }(), adminSbx, missingSbx)
	if err := acme.Delete(ctx, sbx); err != nil {
		t.Errorf("acme's Delete of its sandbox: %v", err)
	}
}

// sameAsMissing checks that a call about another tenant's id failed as not
// found with the same words as the call about a missing id.
func sameAsMissing(t *testing.T, what string, other, missing error, otherID, missingID string) {
	t.Helper()
	if !errors.Is(other, errdefs.ErrNotFound) {
		t.Errorf("%s of another tenant's id: %v, want not found", what, other)
		return
	}
	if !errors.Is(missing, errdefs.ErrNotFound) {
		t.Errorf("%s of a missing id: %v, want not found", what, missing)
		return
	}
	o := strings.ReplaceAll(other.Error(), otherID, "ID")
	m := strings.ReplaceAll(missing.Error(), missingID, "ID")
	if o != m {
		t.Errorf("%s: another tenant's id answers %q, a missing one %q: existence leaks", what, o, m)
	}
}

// TestRunQuota: a tenant at its run quota cannot start, fork or verify a
// run until one finishes; other tenants and the admin can.
func TestRunQuota(t *testing.T) {
	e := newEnv(t, store.Quota{Runs: 5}, nil)
	ctx := context.Background()
	one := e.client(e.tenant(t, "one", &reinsv1.Quota{Runs: 1}))
	other := e.client(e.tenant(t, "other", nil))

	first, err := one.StartRun(ctx, &reinsv1.RunSpec{Task: "ask", Model: "script:ask"})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, one, first.Id, "waiting_approval")
	_, err = one.StartRun(ctx, &reinsv1.RunSpec{Task: "again", Model: "script:hi"})
	wantKind(t, "a second run over the quota", err, errdefs.ErrResourceExhausted)
	want := "tenant one has 1 active runs, its limit: cancel some (reins runs cancel) or wait for them to finish, or raise the quota"
	if err != nil && err.Error() != want {
		t.Errorf("quota error %q, want %q", err, want)
	}
	if runs, _ := one.ListRuns(ctx, nil); len(runs) != 1 {
		t.Errorf("a refused start left %d runs, want 1", len(runs))
	}
	for name, c := range map[string]*client.Client{"other": other, "admin": e.client(adminToken)} {
		if _, err := c.StartRun(ctx, &reinsv1.RunSpec{Task: "hi", Model: "script:hi"}); err != nil {
			t.Errorf("%s's start while tenant one is at its quota: %v", name, err)
		}
	}
	if err := one.AnswerRun(ctx, first.Id, "yes"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, one, first.Id, "succeeded")
	if _, err := one.StartRun(ctx, &reinsv1.RunSpec{Task: "now", Model: "script:hi"}); err != nil {
		t.Errorf("a start once the first run finished: %v", err)
	}
}
