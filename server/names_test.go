package server_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/api/reins/v1/reinsv1connect"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/server"
	"github.com/reinsdev/reins/store"
)

// sameError fails unless every error is of kind and all read alike.
func sameError(t *testing.T, what string, kind error, errs map[string]error) string {
	t.Helper()
	var first string
	for name, err := range errs {
		err = errdefs.FromConnect(err)
		if !errors.Is(err, kind) {
			t.Errorf("%s %s: %v, want %v", what, name, err, kind)
			continue
		}
		if first == "" {
			first = err.Error()
		} else if err.Error() != first {
			t.Errorf("%s: %s answers %q, another %q", what, name, err, first)
		}
	}
	return first
}

func TestCheckImage(t *testing.T) {
	for _, ref := range []string{"oci:/etc", "docker-archive:/etc/passwd", " OCI:/x", "Docker-Archive:x.tar"} {
		if err := server.CheckImage("acme", ref); !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("tenant, %q: %v, want permission denied", ref, err)
		}
		if err := server.CheckImage("", ref); err != nil {
			t.Errorf("admin, %q: %v, want allowed", ref, err)
		}
	}
	for _, ref := range []string{"busybox", "debian", "docker.io/library/alpine:3", "localhost:5000/x:oci"} {
		if err := server.CheckImage("acme", ref); err != nil {
			t.Errorf("tenant, %q: %v, want allowed", ref, err)
		}
	}
}

// TestTenantsNameNoHostImage: a tenant's oci:/docker-archive: image is
// refused, for a sandbox and for a run, with one answer that names nothing.
func TestTenantsNameNoHostImage(t *testing.T) {
	e := newEnv(t, store.Quota{}, nil)
	tok := e.tenant(t, "acme", nil)
	ctx := context.Background()
	sc := reinsv1connect.NewSandboxServiceClient(&http.Client{Transport: bearer(tok)}, e.url)
	rc := e.rawRuns(tok)
	errs := map[string]error{}
	for _, ref := range []string{"oci:/etc", "oci:/nosuch", "docker-archive:/etc/passwd", "docker-archive:/nosuch"} {
		st, err := sc.Create(ctx, connect.NewRequest(&reinsv1.CreateSandboxRequest{Spec: &reinsv1.SandboxSpec{Image: ref}}))
		if err == nil {
			for st.Receive() {
			}
			err = st.Err()
			st.Close()
		}
		errs["sandbox "+ref] = err
		_, errs["run "+ref] = rc.Start(ctx, connect.NewRequest(&reinsv1.StartRunRequest{Spec: &reinsv1.RunSpec{
			Task: "x", Model: "script:hi", Sandboxes: map[string]string{"default": ref}}}))
	}
	msg := sameError(t, "a tenant's host image", errdefs.ErrPermissionDenied, errs)
	for _, w := range []string{"/etc", "nosuch", "passwd"} {
		if strings.Contains(msg, w) {
			t.Errorf("the refusal names %q: %s", w, msg)
		}
	}
	if runs, _ := e.st.ListRuns(ctx, store.RunFilter{}); len(runs) != 0 {
		t.Errorf("refused starts made %d runs", len(runs))
	}
}

// TestReplayIsRefusedAtTheAPI: nobody, the admin neither, names replay:,
// in Start or Fork, and the answer is the same whatever run it names.
func TestReplayIsRefusedAtTheAPI(t *testing.T) {
	e := newEnv(t, store.Quota{}, nil)
	tok := e.tenant(t, "acme", nil)
	ctx := context.Background()
	own, err := e.client(tok).StartRun(ctx, &reinsv1.RunSpec{Task: "x", Model: "script:hi"})
	if err != nil {
		t.Fatal(err)
	}
	errs := map[string]error{}
	for who, token := range map[string]string{"admin": adminToken, "acme": tok} {
		rc := e.rawRuns(token)
		for _, id := range []string{own.Id, "run_00000000deadbeef", "nosuch"} {
			_, errs[who+" start "+id] = rc.Start(ctx, connect.NewRequest(&reinsv1.StartRunRequest{Spec: &reinsv1.RunSpec{Task: "x", Model: "replay:" + id}}))
			_, errs[who+" fork "+id] = rc.Fork(ctx, connect.NewRequest(&reinsv1.ForkRunRequest{Id: own.Id, AtSeq: 1, Model: "replay:" + id}))
		}
	}
	if msg := sameError(t, "replay:", errdefs.ErrInvalidArgument, errs); strings.Contains(msg, own.Id) {
		t.Errorf("the refusal names the run: %s", msg)
	}
	if runs, _ := e.st.ListRuns(ctx, store.RunFilter{}); len(runs) != 1 {
		t.Errorf("%d runs after refused replays, want 1", len(runs))
	}
}

// TestAttachMissingSandboxRefused: a run attaching a sandbox that does not
// exist is refused before its row exists, for the admin as for a tenant.
func TestAttachMissingSandboxRefused(t *testing.T) {
	e := newEnv(t, store.Quota{}, nil)
	tok := e.tenant(t, "acme", nil)
	ctx := context.Background()
	for who, token := range map[string]string{"admin": adminToken, "acme": tok} {
		_, err := e.client(token).StartRun(ctx, &reinsv1.RunSpec{Task: "x", Model: "script:hi",
			Sandboxes: map[string]string{"default": "sandbox:nosuch"}})
		if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "nosuch") || !strings.Contains(err.Error(), "reins sandbox ls") {
			t.Errorf("%s attaching sandbox nosuch: %v, want not found naming it and what to do", who, err)
		}
	}
	if runs, _ := e.st.ListRuns(ctx, store.RunFilter{}); len(runs) != 0 {
		t.Errorf("refused starts made %d runs", len(runs))
	}
}
