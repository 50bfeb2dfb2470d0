package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/api/reins/v1/reinsv1connect"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/errdefs"
)

// asTenant runs the CLI with a tenant's token.
func (s *service) asTenant(token string, args ...string) result {
	s.t.Helper()
	return s.runEnv([]string{"REINS_TOKEN=" + token}, args...)
}

// newTenant creates a tenant with the admin token and returns its token.
func (s *service) newTenant(name string, flags ...string) string {
	s.t.Helper()
	if out := strings.TrimSpace(s.must(append([]string{"tenant", "create", name}, flags...)...)); out != name {
		s.t.Fatalf("tenant create printed %q, want %q", out, name)
	}
	tok := strings.TrimSpace(s.must("tenant", "token", name))
	if !strings.HasPrefix(tok, "reins_") || len(tok) != len("reins_")+64 {
		s.t.Fatalf("tenant token printed %q, want reins_ and 64 hex digits", tok)
	}
	return tok
}

// TestTenantIsolation: tenant beta, with its own token, calls every API
// method, through the CLI and through the Go client, with tenant acme's
// sandbox and run ids; every answer is "not found" worded exactly as for
// an id that does not exist, or an empty list, and acme still sees its own.
func TestTenantIsolation(t *testing.T) {
	s := startService(t)
	acme := s.newTenant("acme")
	beta := s.newTenant("beta")

	sbx := strings.TrimSpace(s.asTenant(acme, "sandbox", "create").stdout)
	if sbx == "" {
		t.Fatal("acme could not create a sandbox")
	}
	script := writeScript(t, map[string]any{"text": "hi"})
	r := s.asTenant(acme, "run", "--json", "--model", "script:"+script, "say hi")
	var run struct{ ID, Status string }
	if err := json.Unmarshal([]byte(r.stdout), &run); r.code != 0 || err != nil || run.ID == "" {
		t.Fatalf("acme's run: %s", r)
	}
	const missingSbx, missingRun = "0123456789ab", "run_00000000deadbeef"

	// The CLI, command by command.
	cli := []struct {
		args func(sbx, run string) []string
		id   func(sbx, run string) string // the id the answer may name
	}{
		{func(sb, _ string) []string { return []string{"sandbox", "show", sb} }, first},
		{func(sb, _ string) []string { return []string{"sandbox", "exec", sb, "--", "true"} }, first},
		{func(sb, _ string) []string { return []string{"sandbox", "ps", sb} }, first},
		{func(sb, _ string) []string { return []string{"sandbox", "cp", sb + ":/etc/hostname", t.TempDir()} }, first},
		{func(sb, _ string) []string { return []string{"sandbox", "rm", sb} }, first},
		{func(sb, _ string) []string { return []string{"run", "--in", sb, "--model", "script:" + script, "x"} }, first},
		{func(_, rn string) []string { return []string{"runs", "show", rn} }, second},
		{func(_, rn string) []string { return []string{"runs", "events", rn} }, second},
		{func(_, rn string) []string { return []string{"runs", "cancel", rn} }, second},
		{func(_, rn string) []string { return []string{"runs", "answer", rn, "yes"} }, second},
		{func(_, rn string) []string { return []string{"runs", "artifacts", rn} }, second},
		{func(_, rn string) []string { return []string{"runs", "approve", rn} }, second},
		{func(_, rn string) []string { return []string{"runs", "deny", rn, "--reason", "no"} }, second},
		{func(_, rn string) []string { return []string{"runs", "pause", rn} }, second},
		{func(_, rn string) []string { return []string{"runs", "resume", rn} }, second},
		{func(_, rn string) []string { return []string{"runs", "fork", rn, "--at", "1"} }, second},
		{func(_, rn string) []string { return []string{"runs", "replay", rn} }, second},
	}
	for _, c := range cli {
		other := s.asTenant(beta, c.args(sbx, run.ID)...)
		missing := s.asTenant(beta, c.args(missingSbx, missingRun)...)
		what := "reins " + strings.Join(c.args(sbx, run.ID), " ")
		if other.code == 0 || !strings.Contains(other.stderr, "not found") {
			t.Errorf("%s with beta's token: %s; want not found", what, other)
			continue
		}
		o := strings.ReplaceAll(other.stdout+other.stderr, c.id(sbx, run.ID), "ID")
		m := strings.ReplaceAll(missing.stdout+missing.stderr, c.id(missingSbx, missingRun), "ID")
		if o != m || other.code != missing.code {
			t.Errorf("%s: another tenant's id answers %q (exit %d), a missing one %q (exit %d): existence leaks",
				what, o, other.code, m, missing.code)
		}
	}
	for _, args := range [][]string{{"sandbox", "ls", "--json"}, {"runs", "ls", "--json"}} {
		if r := s.asTenant(beta, args...); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
			t.Errorf("reins %s with beta's token: %s; want []", strings.Join(args, " "), r)
		}
	}
	for _, args := range [][]string{{"tenant", "ls"}, {"tenant", "create", "evil"}, {"tenant", "token", "acme"}, {"tenant", "quota", "beta", "--max-sandboxes", "-1"}} {
		r := s.asTenant(beta, args...)
		if r.code == 0 || !strings.Contains(r.stderr, "admin token") || !strings.Contains(r.stderr, "tenant beta") {
			t.Errorf("reins %s with a tenant's token: %s; want a permission error that says the admin token is needed",
				strings.Join(args, " "), r)
		}
	}

	// acme's snapshot is no other tenant's to list, remove or make
	// sandboxes from.
	if r := s.asTenant(acme, "sandbox", "snapshot", sbx, "--name", "acme-snap"); r.code != 0 {
		t.Fatalf("acme's snapshot of its sandbox: %s", r)
	}
	for _, c := range [][]string{{"snapshot", "rm", "NAME"}, {"sandbox", "create", "--image", "snapshot:NAME"}} {
		args := func(name string) []string {
			return strings.Split(strings.ReplaceAll(strings.Join(c, "\x00"), "NAME", name), "\x00")
		}
		other, missing := s.asTenant(beta, args("acme-snap")...), s.asTenant(beta, args("none-snap")...)
		o := strings.ReplaceAll(other.stderr, "acme-snap", "NAME")
		m := strings.ReplaceAll(missing.stderr, "none-snap", "NAME")
		if other.code == 0 || !strings.Contains(other.stderr, "not found") || o != m {
			t.Errorf("reins %v with beta's token: %s; a missing one: %s", args("acme-snap"), other, missing)
		}
	}
	if r := s.asTenant(beta, "snapshot", "ls", "--json"); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("beta's snapshot ls: %s; want []", r)
	}
	if r := s.asTenant(acme, "snapshot", "ls"); !strings.Contains(r.stdout, "acme-snap") {
		t.Errorf("acme's snapshot ls lacks its snapshot: %s", r)
	}

	// The Go client, method by method, so that no method is skipped.
	checkTenantIsolationAPI(t, s, beta, sbx, run.ID, missingSbx, missingRun)

	// acme still sees and uses its own; the admin sees everything.
	for name, tok := range map[string]string{"acme": acme, "admin": s.token} {
		if r := s.asTenant(tok, "sandbox", "exec", sbx, "--", "echo", "still here"); r.code != 0 || !strings.Contains(r.stdout, "still here") {
			t.Errorf("%s's exec in acme's sandbox: %s", name, r)
		}
		if r := s.asTenant(tok, "runs", "show", run.ID); r.code != 0 || !strings.Contains(r.stdout, "succeeded") {
			t.Errorf("%s's runs show of acme's run: %s", name, r)
		}
		if r := s.asTenant(tok, "sandbox", "ls"); !strings.Contains(r.stdout, sbx) {
			t.Errorf("%s's sandbox ls lacks acme's sandbox: %s", name, r)
		}
	}
	// Templates are per tenant: another tenant's is answered as a
	// missing one by rm, by create --image template:NAME and by a build
	// from it; it is never listed; a build of the same name and steps
	// makes the tenant's own, taking nothing from the other's cache.
	if r := s.asTenant(acme, "template", "build", "acmeweb", "--from", "busybox", "--run", "echo acme > /owner"); r.code != 0 {
		t.Fatalf("acme's template build: %s", r)
	}
	tplCLI := [][]string{
		{"template", "rm", "NAME"},
		{"sandbox", "create", "--image", "template:NAME"},
		{"template", "build", "mine", "--from", "template:NAME", "--run", "true"},
	}
	for _, args := range tplCLI {
		with := func(name string) []string {
			out := slices.Clone(args)
			for i := range out {
				out[i] = strings.ReplaceAll(out[i], "NAME", name)
			}
			return out
		}
		other, missing := s.asTenant(beta, with("acmeweb")...), s.asTenant(beta, with("nosuchweb")...)
		if other.code == 0 || !strings.Contains(other.stderr, "not found") ||
			strings.ReplaceAll(other.stderr, "acmeweb", "NAME") != strings.ReplaceAll(missing.stderr, "nosuchweb", "NAME") {
			t.Errorf("reins %v with beta's token: %s; a missing one: %s; want the same not found", with("acmeweb"), other, missing)
		}
	}
	if r := s.asTenant(beta, "template", "ls", "--json"); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("template ls with beta's token: %s; want []", r)
	}
	if r := s.asTenant(beta, "template", "build", "acmeweb", "--from", "busybox", "--run", "echo acme > /owner"); r.code != 0 || strings.Contains(r.stderr, "cached") {
		t.Errorf("beta's build of the same name and steps: %s; want its own, uncached", r)
	}
	if r := s.asTenant(acme, "template", "ls", "--json"); r.code != 0 || strings.Count(r.stdout, `"acmeweb"`) != 1 {
		t.Errorf("acme's template ls after beta's build: %s", r)
	}

	// The admin's sandboxes are no tenant's either.
	adminSbx := s.create()
	if r := s.asTenant(acme, "sandbox", "show", adminSbx); r.code == 0 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("acme's show of the admin's sandbox: %s", r)
	}
	if r := s.asTenant(acme, "sandbox", "ls"); strings.Contains(r.stdout, adminSbx) {
		t.Errorf("acme's sandbox ls shows the admin's sandbox: %s", r)
	}
	if r := s.asTenant(acme, "sandbox", "rm", sbx); r.code != 0 {
		t.Errorf("acme's rm of its sandbox: %s", r)
	}
}

func first(a, _ string) string  { return a }
func second(_, b string) string { return b }

// checkTenantIsolationAPI calls every method of the reins services and of
// the executor (through the service's proxy) with token and another
// tenant's ids.
func checkTenantIsolationAPI(t *testing.T, s *service, token, sbx, run, missingSbx, missingRun string) {
	ctx := context.Background()
	hc := &http.Client{Transport: tenantBearer(token)}
	rc := reinsv1connect.NewRunServiceClient(hc, s.url)
	sc := reinsv1connect.NewSandboxServiceClient(hc, s.url)
	tc := reinsv1connect.NewTenantServiceClient(hc, s.url)
	drain := func(st interface {
		Receive() bool
		Err() error
		Close() error
	}, err error) error {
		if err != nil {
			return err
		}
		defer st.Close()
		for st.Receive() {
		}
		return st.Err()
	}
	unary := func(_ any, err error) error { return err }

	runCalls := map[string]func(id string) error{
		"Get": func(id string) error { return unary(rc.Get(ctx, connect.NewRequest(&reinsv1.GetRunRequest{Id: id}))) },
		"Events": func(id string) error {
			return drain(rc.Events(ctx, connect.NewRequest(&reinsv1.RunEventsRequest{Id: id})))
		},
		"Cancel": func(id string) error {
			return unary(rc.Cancel(ctx, connect.NewRequest(&reinsv1.CancelRunRequest{Id: id})))
		},
		"Answer": func(id string) error {
			return unary(rc.Answer(ctx, connect.NewRequest(&reinsv1.AnswerRunRequest{Id: id, Text: "yes"})))
		},
		"Approve": func(id string) error {
			return unary(rc.Approve(ctx, connect.NewRequest(&reinsv1.ApproveRequest{Id: id})))
		},
		"Deny": func(id string) error {
			return unary(rc.Deny(ctx, connect.NewRequest(&reinsv1.DenyRequest{Id: id, Reason: "no"})))
		},
		"Pause": func(id string) error {
			return unary(rc.Pause(ctx, connect.NewRequest(&reinsv1.PauseRunRequest{Id: id})))
		},
		"Resume": func(id string) error {
			return unary(rc.Resume(ctx, connect.NewRequest(&reinsv1.ResumeRunRequest{Id: id})))
		},
		"Fork": func(id string) error {
			return unary(rc.Fork(ctx, connect.NewRequest(&reinsv1.ForkRunRequest{Id: id, AtSeq: 1})))
		},
		"Verify": func(id string) error {
			return unary(rc.Verify(ctx, connect.NewRequest(&reinsv1.VerifyRunRequest{Id: id})))
		},
		"Compare": func(id string) error {
			return unary(rc.Compare(ctx, connect.NewRequest(&reinsv1.CompareRunsRequest{Recorded: id, Replayed: id})))
		},
		"ListArtifacts": func(id string) error {
			return unary(rc.ListArtifacts(ctx, connect.NewRequest(&reinsv1.ListArtifactsRequest{Id: id})))
		},
		"GetArtifact": func(id string) error {
			return drain(rc.GetArtifact(ctx, connect.NewRequest(&reinsv1.GetArtifactRequest{Id: id, NameOrDigest: "x"})))
		},
		"Start": nil, "List": nil, // below
	}
	tenantCovers(t, reinsv1.File_reins_v1_run_proto.Services().ByName("RunService"), runCalls)
	for name, call := range runCalls {
		if call != nil {
			tenantSameAsMissing(t, "RunService."+name, call(run), call(missingRun), run, missingRun)
		}
	}
	start := func(id string) error {
		return unary(rc.Start(ctx, connect.NewRequest(&reinsv1.StartRunRequest{Spec: &reinsv1.RunSpec{
			Task: "x", Model: "script:/nonexistent", Sandboxes: map[string]string{"default": "sandbox:" + id}}})))
	}
	tenantSameAsMissing(t, "RunService.Start attaching a sandbox", start(sbx), start(missingSbx), sbx, missingSbx)
	if resp, err := rc.List(ctx, connect.NewRequest(&reinsv1.ListRunsRequest{})); err != nil || len(resp.Msg.Runs) != 0 {
		t.Errorf("RunService.List: %v, %v; want none", resp, err)
	}

	sbCalls := map[string]func(id string) error{
		"Get": func(id string) error {
			return unary(sc.Get(ctx, connect.NewRequest(&reinsv1.GetSandboxRequest{Id: id})))
		},
		"Delete": func(id string) error {
			return unary(sc.Delete(ctx, connect.NewRequest(&reinsv1.DeleteSandboxRequest{Id: id})))
		},
		"PortURL": func(id string) error {
			return unary(sc.PortURL(ctx, connect.NewRequest(&reinsv1.PortURLRequest{Id: id, Port: 3000, Public: true})))
		},
		// Another tenant must neither open a sandbox's network nor read
		// where it connected.
		"UpdateNetwork": func(id string) error {
			return unary(sc.UpdateNetwork(ctx, connect.NewRequest(&reinsv1.UpdateNetworkRequest{Id: id,
				Mode: reinsv1.NetworkMode_NETWORK_MODE_OPEN, AllowHosts: &reinsv1.StringList{Items: []string{"example.com"}}})))
		},
		"EgressLog": func(id string) error {
			return drain(sc.EgressLog(ctx, connect.NewRequest(&reinsv1.EgressLogRequest{Id: id})))
		},
		// Nor keep it alive (or end it sooner).
		"Extend": func(id string) error {
			return unary(sc.Extend(ctx, connect.NewRequest(&reinsv1.ExtendSandboxRequest{Id: id, TtlMs: 3_600_000})))
		},
		// Nor run a command in it.
		"RunCommand": func(id string) error {
			return unary(sc.RunCommand(ctx, connect.NewRequest(&reinsv1.RunCommandRequest{SandboxId: id, Command: "true"})))
		},
		// Nor suspend, resume, save, fork it or read its lifecycle.
		"Suspend": func(id string) error {
			return unary(sc.Suspend(ctx, connect.NewRequest(&reinsv1.SuspendSandboxRequest{Id: id})))
		},
		"Resume": func(id string) error {
			return unary(sc.Resume(ctx, connect.NewRequest(&reinsv1.ResumeSandboxRequest{Id: id})))
		},
		"Pause": func(id string) error {
			return unary(sc.Pause(ctx, connect.NewRequest(&reinsv1.PauseSandboxRequest{Id: id, OrSuspend: true})))
		},
		"Snapshot": func(id string) error {
			return unary(sc.Snapshot(ctx, connect.NewRequest(&reinsv1.SnapshotSandboxRequest{Id: id, Name: "beta-snap"})))
		},
		"Fork": func(id string) error {
			return unary(sc.Fork(ctx, connect.NewRequest(&reinsv1.ForkSandboxRequest{Id: id, Count: 1})))
		},
		"Events": func(id string) error {
			return drain(sc.Events(ctx, connect.NewRequest(&reinsv1.SandboxEventsRequest{Id: id})))
		},
		// Nor watch its screen or take it over.
		"ViewURL": func(id string) error {
			return unary(sc.ViewURL(ctx, connect.NewRequest(&reinsv1.ViewURLRequest{Id: id, Public: true})))
		},
		"TakeOver": func(id string) error {
			return unary(sc.TakeOver(ctx, connect.NewRequest(&reinsv1.TakeOverRequest{Id: id})))
		},
		// Snapshots are named by their tenant: acme's acme-snap (made
		// above) is missing to another tenant, as one that never was.
		"DeleteSnapshot": nil, "ListSnapshots": nil, // by name, above
		// Templates are named by their tenant: TestTenantIsolation, by name.
		"BuildTemplate": nil, "ListTemplates": nil, "DeleteTemplate": nil,
		"Create": nil, "List": nil, // Create names no id; List below
		"Version": nil, // below: it names no tenant's things
		// A built-in image is the same for every tenant; BuildImage names no tenant's things.
		"BuildImage": nil,
	}
	tenantCovers(t, reinsv1.File_reins_v1_sandbox_proto.Services().ByName("SandboxService"), sbCalls)
	for name, call := range sbCalls {
		if call != nil {
			tenantSameAsMissing(t, "SandboxService."+name, call(sbx), call(missingSbx), sbx, missingSbx)
		}
	}
	if resp, err := sc.List(ctx, connect.NewRequest(&reinsv1.ListSandboxesRequest{})); err != nil || len(resp.Msg.Sandboxes) != 0 {
		t.Errorf("SandboxService.List: %v, %v; want none", resp, err)
	}
	del := func(name string) error {
		return unary(sc.DeleteSnapshot(ctx, connect.NewRequest(&reinsv1.DeleteSnapshotRequest{Name: name})))
	}
	tenantSameAsMissing(t, "SandboxService.DeleteSnapshot", del("acme-snap"), del("none-snap"), "acme-snap", "none-snap")
	if resp, err := sc.ListSnapshots(ctx, connect.NewRequest(&reinsv1.ListSnapshotsRequest{})); err != nil || len(resp.Msg.Snapshots) != 0 {
		t.Errorf("SandboxService.ListSnapshots: %v, %v; want none", resp, err)
	}
	// Any token may ask the version; the answer is the same for all.
	if resp, err := sc.Version(ctx, connect.NewRequest(&reinsv1.VersionRequest{})); err != nil || len(resp.Msg.Backends) == 0 {
		t.Errorf("SandboxService.Version: %v, %v", resp, err)
	}

	ex := executorv1.File_reins_executor_v1_executor_proto.Services().Get(0)
	for i := range ex.Methods().Len() {
		procedure := "/" + string(ex.FullName()) + "/" + string(ex.Methods().Get(i).Name())
		call := func(id string) error { return proxyCall(s.url, token, procedure, id) }
		tenantSameAsMissing(t, "executor "+procedure, call(sbx), call(missingSbx), sbx, missingSbx)
	}
	// And through the client's typed helpers, streaming included.
	cl := client.New(s.url, token)
	_, err := client.Unary(ctx, cl.Sandbox(sbx), cl.Sandbox(sbx).RPC().Stat, &executorv1.StatRequest{Path: "/"})
	wantNotFound(t, "Stat", err)
	_, err = cl.Sandbox(sbx).Computer(ctx, &executorv1.ComputerRequest{Action: "screenshot"})
	wantNotFound(t, "Computer", err)
	_, err = cl.Sandbox(sbx).Exec(ctx, &executorv1.ExecRequest{Argv: []string{"true"}}, nil)
	wantNotFound(t, "Exec", err)
	// The raw file routes beside the API: neither read nor written.
	readRaw := func(id string) error {
		r, err := cl.Sandbox(id).ReadRaw(ctx, "/etc/hostname")
		if err == nil {
			r.Close()
		}
		return err
	}
	tenantSameAsMissing(t, "GET /v1/sandboxes/{id}/files", readRaw(sbx), readRaw(missingSbx), sbx, missingSbx)
	writeRaw := func(id string) error { return cl.Sandbox(id).WriteRaw(ctx, "/tmp/x", strings.NewReader("x"), 1) }
	tenantSameAsMissing(t, "PUT /v1/sandboxes/{id}/files", writeRaw(sbx), writeRaw(missingSbx), sbx, missingSbx)

	tenantCalls := map[string]func() error{
		"Create": func() error {
			return unary(tc.Create(ctx, connect.NewRequest(&reinsv1.CreateTenantRequest{Name: "evil"})))
		},
		"List": func() error { return unary(tc.List(ctx, connect.NewRequest(&reinsv1.ListTenantsRequest{}))) },
		"Token": func() error {
			return unary(tc.Token(ctx, connect.NewRequest(&reinsv1.TenantTokenRequest{Name: "acme"})))
		},
		"SetQuota": func() error {
			return unary(tc.SetQuota(ctx, connect.NewRequest(&reinsv1.SetTenantQuotaRequest{Name: "acme"})))
		},
		"SetPolicy": func() error {
			return unary(tc.SetPolicy(ctx, connect.NewRequest(&reinsv1.SetTenantPolicyRequest{Name: "acme", Policy: "tools:\n  bash: allow\n"})))
		},
	}
	tenantCovers(t, reinsv1.File_reins_v1_tenant_proto.Services().ByName("TenantService"), tenantCalls)
	for name, call := range tenantCalls {
		if err := errdefs.FromConnect(call()); !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("TenantService.%s with a tenant's token: %v, want permission denied", name, err)
		}
	}
}

type tenantBearer string

func (b tenantBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// proxyCall sends an executor call for sandbox id through the service as
// Connect JSON and returns the service's error; the service answers before
// forwarding, so the method's request type does not matter.
func proxyCall(url, token, procedure, id string) error {
	req, _ := http.NewRequest("POST", url+procedure, strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Reins-Sandbox", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var body struct{ Code, Message string }
	if err := json.Unmarshal(data, &body); err != nil || body.Code == "" {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, data)
	}
	var code connect.Code
	if err := code.UnmarshalText([]byte(body.Code)); err != nil {
		return err
	}
	ce := connect.NewError(code, errors.New(body.Message))
	ce.Meta().Set(errdefs.KindHeader, resp.Header.Get(errdefs.KindHeader))
	return ce
}

// tenantCovers fails unless calls names every method of svc, so that a
// method added later cannot escape this test.
func tenantCovers[F any](t *testing.T, svc protoreflect.ServiceDescriptor, calls map[string]F) {
	t.Helper()
	for i := range svc.Methods().Len() {
		if _, ok := calls[string(svc.Methods().Get(i).Name())]; !ok {
			t.Errorf("%s.%s is not in the tenant isolation test: add it", svc.Name(), svc.Methods().Get(i).Name())
		}
	}
}

// tenantSameAsMissing checks that a call about another tenant's id failed
// as not found, worded as the call about a missing id.
func tenantSameAsMissing(t *testing.T, what string, other, missing error, otherID, missingID string) {
	t.Helper()
	other, missing = errdefs.FromConnect(other), errdefs.FromConnect(missing)
	if !errors.Is(other, errdefs.ErrNotFound) || !errors.Is(missing, errdefs.ErrNotFound) {
		t.Errorf("%s: another tenant's id: %v; a missing one: %v; want not found for both", what, other, missing)
		return
	}
	o := strings.ReplaceAll(other.Error(), otherID, "ID")
	m := strings.ReplaceAll(missing.Error(), missingID, "ID")
	if o != m {
		t.Errorf("%s: another tenant's id answers %q, a missing one %q: existence leaks", what, o, m)
	}
}

func wantNotFound(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(errdefs.FromConnect(err), errdefs.ErrNotFound) {
		t.Errorf("%s with another tenant's sandbox: %v, want not found", what, err)
	}
}

// TestTenantQuota: a tenant allowed one sandbox gets a clear error for the
// second, and nothing of it is left; raising the quota lets it through.
// Runs are bounded the same way.
func TestTenantQuota(t *testing.T) {
	s := startService(t, "--tenant-max-runs", "1")
	solo := s.newTenant("solo", "--max-sandboxes", "1")
	other := s.newTenant("other", "--max-sandboxes", "1")

	sbDir := filepath.Join(s.dataDir, "sandboxes")
	first := strings.TrimSpace(s.asTenant(solo, "sandbox", "create").stdout)
	if first == "" {
		t.Fatal("the first sandbox within the quota failed")
	}
	before, _ := os.ReadDir(sbDir)
	r := s.asTenant(solo, "sandbox", "create")
	want := "tenant solo has 1 running sandboxes, its limit: remove some (reins sandbox rm) or raise the quota"
	if r.code == 0 || !strings.Contains(r.stderr, want) {
		t.Fatalf("the second sandbox over the quota: %s\nwant an error saying %q", r, want)
	}
	after, _ := os.ReadDir(sbDir)
	if len(after) != len(before) {
		t.Errorf("the refused create left something in %s: %d entries before, %d after", sbDir, len(before), len(after))
	}
	var sbs []map[string]any
	json.Unmarshal([]byte(s.asTenant(solo, "sandbox", "ls", "--json").stdout), &sbs)
	if len(sbs) != 1 {
		t.Errorf("solo has %d sandboxes after a refused create, want 1: %v", len(sbs), sbs)
	}
	// Other tenants and the admin are not held by solo's quota.
	if r := s.asTenant(other, "sandbox", "create"); r.code != 0 {
		t.Errorf("another tenant's create: %s", r)
	}
	s.create()

	// Raising the quota, or removing a sandbox, makes room.
	if out := s.must("tenant", "quota", "solo", "--max-sandboxes", "2"); !strings.Contains(out, "max sandboxes 2") {
		t.Errorf("tenant quota: %s", out)
	}
	if r := s.asTenant(solo, "sandbox", "create"); r.code != 0 {
		t.Errorf("a create after raising the quota: %s", r)
	}
	s.asTenant(solo, "sandbox", "rm", first)
	if r := s.asTenant(solo, "sandbox", "create"); r.code != 0 {
		t.Errorf("a create after removing one: %s", r)
	}
	if ls := s.must("tenant", "ls"); !strings.Contains(ls, "solo") || !strings.Contains(ls, "1 (default)") {
		t.Errorf("tenant ls lacks solo's quota or the default run quota:\n%s", ls)
	}
	// A run's sandboxes are its tenant's, and count against its quota: the
	// model is told why its tool failed.
	r = s.asTenant(solo, "run", "--model", "script:"+writeScript(t, bash("echo hi"), map[string]any{"text": "done"}), "use a sandbox")
	if want := "tenant solo has 2 running sandboxes, its limit"; !strings.Contains(r.stdout, want) {
		t.Errorf("a run needing a sandbox while its tenant is at its quota: %s\nwant its tool call to fail saying %q", r, want)
	}

	// Runs: the service's default here is one unfinished run a tenant.
	ask := writeScript(t, map[string]any{"tool_calls": []any{map[string]any{"name": "ask_human", "input": map[string]any{"question": "go on?"}}}},
		map[string]any{"text": "done"})
	id := strings.TrimSpace(s.asTenant(solo, "run", "--detach", "--model", "script:"+ask, "ask me").stdout)
	if id == "" {
		t.Fatal("a first run within the quota failed")
	}
	r = s.asTenant(solo, "run", "--detach", "--model", "script:"+ask, "again")
	if want := "tenant solo has 1 active runs, its limit"; r.code == 0 || !strings.Contains(r.stderr, want) {
		t.Errorf("a second run over the quota: %s\nwant an error saying %q", r, want)
	}
	if r := s.asTenant(solo, "runs", "cancel", id); r.code != 0 {
		t.Fatalf("cancel: %s", r)
	}
	if r := s.asTenant(solo, "run", "--detach", "--model", "script:"+ask, "now"); r.code != 0 {
		t.Errorf("a run once the first was cancelled: %s", r)
	}
}
