package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/api/reins/v1/reinsv1connect"
	"github.com/reinsdev/reins/errdefs"
)

// hangLimit bounds each API call of these tests. It detects a hang (a
// FIFO read that never ends, a read of /dev/zero that never ends); it is
// no measure of speed, so it is generous.
const hangLimit = 90 * time.Second

// apiAs is the run and sandbox API with token.
type apiAs struct {
	runs      reinsv1connect.RunServiceClient
	sandboxes reinsv1connect.SandboxServiceClient
}

func (s *service) apiAs(token string) apiAs {
	hc := &http.Client{Transport: tenantBearer(token)}
	return apiAs{reinsv1connect.NewRunServiceClient(hc, s.url), reinsv1connect.NewSandboxServiceClient(hc, s.url)}
}

// start starts a run through the API and returns its error, failing the
// test if the service takes longer than hangLimit to answer.
func (a apiAs) start(t *testing.T, spec *reinsv1.RunSpec) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	resp, err := a.runs.Start(ctx, connect.NewRequest(&reinsv1.StartRunRequest{Spec: spec}))
	if ctx.Err() != nil {
		t.Fatalf("RunService.Start %s: no answer after %s: the service hangs", spec.Model, hangLimit)
	}
	if err != nil {
		return "", errdefs.FromConnect(err)
	}
	return resp.Msg.Run.Id, nil
}

// createSandbox creates a sandbox from image through the API.
func (a apiAs) createSandbox(t *testing.T, image string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	st, err := a.sandboxes.Create(ctx, connect.NewRequest(&reinsv1.CreateSandboxRequest{Spec: &reinsv1.SandboxSpec{Image: image}}))
	if err == nil {
		for st.Receive() {
		}
		err = st.Err()
		st.Close()
	}
	if ctx.Err() != nil {
		t.Fatalf("SandboxService.Create %s: no answer after %s: the service hangs", image, hangLimit)
	}
	return errdefs.FromConnect(err)
}

// runCount is how many runs token sees.
func (a apiAs) runCount(t *testing.T) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	resp, err := a.runs.List(ctx, connect.NewRequest(&reinsv1.ListRunsRequest{}))
	if err != nil {
		t.Fatalf("RunService.List (the service must still answer): %v", err)
	}
	return len(resp.Msg.Runs)
}

// sameRefusal checks that every error in errs is a refusal of kind, all
// worded alike, naming none of the words in hidden.
func sameRefusal(t *testing.T, what string, kind error, errs map[string]error, hidden ...string) {
	t.Helper()
	var first, firstName string
	for name, err := range errs {
		if err == nil {
			t.Errorf("%s %s: accepted, want refused", what, name)
			continue
		}
		if !errors.Is(err, kind) {
			t.Errorf("%s %s: %v (kind %v), want %v", what, name, err, errdefs.Kind(err), kind)
		}
		for _, h := range hidden {
			if h != "" && strings.Contains(err.Error(), h) {
				t.Errorf("%s %s: the error names %q: %v", what, name, h, err)
			}
		}
		if first == "" {
			first, firstName = err.Error(), name
		} else if err.Error() != first {
			t.Errorf("%s: %s answers %q, %s answers %q: the answers must not tell them apart", what, firstName, first, name, err)
		}
	}
}

// mkfifo makes a FIFO; a writer that never comes makes a reader wait
// forever. Cleanup opens and closes it for writing, so that a reader
// the old code left waiting is released.
func mkfifo(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "script.fifo")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	return p
}

// TestHostileNames: tenants name no host paths (script:, oci:,
// docker-archive:), users name no internal model (replay:), and a run
// refused at start leaves nothing behind.
func TestHostileNames(t *testing.T) {
	s := startService(t)
	acmeTok := s.newTenant("acme")
	betaTok := s.newTenant("beta")
	admin, acme, beta := s.apiAs(s.token), s.apiAs(acmeTok), s.apiAs(betaTok)
	fifo := mkfifo(t)

	// Issue 7: reins run --in nosuch started the run and failed only at its
	// first tool call. It is refused before any run exists.
	t.Run("RunInNosuch", func(t *testing.T) {
		script := writeScript(t, bash("echo hi"), map[string]any{"text": "done"})
		for who, tok := range map[string]string{"admin": s.token, "tenant": acmeTok} {
			r := s.asTenant(tok, "run", "--in", "nosuch", "--model", "script:"+script, "x")
			if r.code == 0 || !strings.Contains(r.stderr, "nosuch") || !strings.Contains(r.stderr, "reins sandbox ls") {
				t.Errorf("%s: reins run --in nosuch: %s\nwant a refusal naming the sandbox and saying how to find one", who, r)
			}
			if strings.Contains(r.stdout, "run_") {
				t.Errorf("%s: reins run --in nosuch printed a run: %s", who, r)
			}
		}
		if n := admin.runCount(t); n != 0 {
			t.Errorf("after run --in nosuch the admin sees %d runs, want none: %s", n, s.must("runs", "ls"))
		}
	})

	// Finding 4: a tenant's script:PATH was read by the service, as root:
	// /dev/zero until it was killed, a FIFO forever (and every later call
	// with it), and the errors told files, directories and missing paths
	// apart and quoted the first byte of /etc/shadow.
	t.Run("TenantScriptPaths", func(t *testing.T) {
		errs := map[string]error{}
		for _, p := range []string{"/dev/zero", "/etc/shadow", "/root", "/nosuch/script.json", fifo} {
			_, errs[p] = acme.start(t, &reinsv1.RunSpec{Task: "x", Model: "script:" + p})
			// The service still answers everyone.
			beta.runCount(t)
		}
		sameRefusal(t, "a tenant's script:", errdefs.ErrPermissionDenied, errs,
			"/dev/zero", "/etc/shadow", "/root", "nosuch", "fifo", "directory", "no such file", "regular")
		if n := acme.runCount(t); n != 0 {
			t.Errorf("acme has %d runs after refused starts, want none", n)
		}
	})

	// The admin may name a path on the host, but only a regular file: a
	// FIFO or a device is refused at once, without reading it.
	t.Run("AdminScriptNotRegular", func(t *testing.T) {
		for _, p := range []string{fifo, "/dev/zero"} {
			_, err := admin.start(t, &reinsv1.RunSpec{Task: "x", Model: "script:" + p})
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("the admin's script:%s: %v, want refused as not a regular file", p, err)
			}
		}
		// A regular file is still read, from the service's disk.
		script := writeScript(t, map[string]any{"text": "read on the host"})
		if _, err := admin.start(t, &reinsv1.RunSpec{Task: "x", Model: "script:" + script}); err != nil {
			t.Errorf("the admin's script:%s (a regular file): %v", script, err)
		}
	})

	// A tenant keeps the deterministic model: the CLI reads its local
	// script and sends it inline.
	t.Run("TenantInlineScript", func(t *testing.T) {
		script := writeScript(t, bash("echo inline-ok"), map[string]any{"expect": "inline-ok", "text": "played inline"})
		r := s.asTenant(acmeTok, "run", "--json", "--model", "script:"+script, "x")
		var run struct {
			ID, Status, Text string
			Spec             map[string]any
		}
		if err := json.Unmarshal([]byte(r.stdout), &run); r.code != 0 || err != nil || run.Status != "RUN_STATUS_SUCCEEDED" || run.Text != "played inline" {
			t.Fatalf("a tenant's run with a local script: %s", r)
		}
		if sc, _ := run.Spec["script"].(string); !strings.Contains(sc, "inline-ok") {
			t.Errorf("the run's spec carries no inline script (the service read the path?): %v", run.Spec)
		}
	})

	// Finding 6: replay:RUN played another tenant's recorded model
	// responses into the caller's run, and "not found" for a wrong id made
	// it an id oracle. replay: is the engine's own: nobody names it.
	t.Run("Replay", func(t *testing.T) {
		script := writeScript(t, bash("echo recorded"), map[string]any{"text": "done"})
		var acmeRun struct{ ID string }
		r := s.asTenant(acmeTok, "run", "--json", "--model", "script:"+script, "record")
		if err := json.Unmarshal([]byte(r.stdout), &acmeRun); r.code != 0 || err != nil || acmeRun.ID == "" {
			t.Fatalf("acme's run: %s", r)
		}
		before := admin.runCount(t)
		errs := map[string]error{}
		for who, api := range map[string]apiAs{"admin": admin, "acme": acme, "beta": beta} {
			for what, id := range map[string]string{"acme's run": acmeRun.ID, "a missing run": "run_00000000deadbeef", "nosuch": "nosuch"} {
				_, errs[who+" replaying "+what] = api.start(t, &reinsv1.RunSpec{Task: "x", Model: "replay:" + id})
			}
			ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
			_, err := api.runs.Fork(ctx, connect.NewRequest(&reinsv1.ForkRunRequest{Id: acmeRun.ID, AtSeq: 1, Model: "replay:" + acmeRun.ID}))
			cancel()
			errs[who+" forking with replay:"] = errdefs.FromConnect(err)
		}
		sameRefusal(t, "replay:", errdefs.ErrInvalidArgument, errs, acmeRun.ID, "deadbeef", "nosuch", "not found")
		if after := admin.runCount(t); after != before {
			t.Errorf("refused replay: starts made %d runs", after-before)
		}
		// The engine's own replay still works.
		if r := s.asTenant(acmeTok, "runs", "replay", "--verify", acmeRun.ID); r.code != 0 || !strings.Contains(r.stdout, "verified") {
			t.Errorf("acme's runs replay --verify of its own run: %s", r)
		}
	})

	// Finding 5 (naming): oci:PATH and docker-archive:PATH let a tenant
	// make the service stat and read host paths, and the errors told what
	// was there.
	t.Run("TenantImagePaths", func(t *testing.T) {
		layout := t.TempDir()
		os.WriteFile(filepath.Join(layout, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
		os.WriteFile(filepath.Join(layout, "index.json"), []byte(`{"schemaVersion":2,"manifests":[]}`), 0o644)
		refs := []string{"oci:/etc", "oci:" + layout, "oci:" + layout + ":latest", "docker-archive:/etc/passwd",
			"docker-archive:/nosuch.tar", " OCI:/etc", "oci:" + filepath.Join(s.dataDir, "sandboxes")}
		before := acme.runCount(t)
		errs := map[string]error{}
		cli := map[string]result{}
		for _, ref := range refs {
			errs["sandbox "+ref] = acme.createSandbox(t, ref)
			_, errs["run "+ref] = acme.start(t, &reinsv1.RunSpec{Task: "x", Model: "script:x",
				Script: `{"turns":[{"text":"x"}]}`, Sandboxes: map[string]string{"default": ref}})
			cli[ref] = s.asTenant(acmeTok, "sandbox", "create", "--image", ref)
		}
		sameRefusal(t, "a tenant's image", errdefs.ErrPermissionDenied, errs,
			"/etc", layout, "passwd", "nosuch", s.dataDir, "index.json", "no such file")
		var firstRef string
		for ref, r := range cli {
			if r.code == 0 {
				t.Errorf("reins sandbox create --image %q as a tenant: %s", ref, r)
			}
			if firstRef == "" {
				firstRef = ref
			} else if r.stderr != cli[firstRef].stderr || r.code != cli[firstRef].code {
				t.Errorf("sandbox create --image %q answers %s; %q answers %s", ref, r, firstRef, cli[firstRef])
			}
		}
		if after := acme.runCount(t); after != before {
			t.Errorf("refused starts made %d runs", after-before)
		}
		// The admin may still name one (the path is the operator's).
		if err := admin.createSandbox(t, "oci:/nosuch"); errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("the admin's oci:/nosuch: %v, want it tried", err)
		}
	})

	// Issue 7: the transcript said "created" for a sandbox the run was
	// given.
	t.Run("AttachedSaysAttached", func(t *testing.T) {
		id := s.create()
		script := writeScript(t, bash("echo hi"), map[string]any{"text": "done"})
		r := s.run("run", "--in", id, "--model", "script:"+script, "x")
		if r.code != 0 || !strings.Contains(r.stdout, "attached: "+id) || strings.Contains(r.stdout, "created") {
			t.Errorf("reins run --in %s: %s\nwant the sandbox shown as attached", id, r)
		}
	})
}
