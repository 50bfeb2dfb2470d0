package manager

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/internal/testenv"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/gvisor"
	"github.com/reinsdev/reins/sandbox/template"
)

// TestTemplatesGvisor: a build on real gVisor sandboxes saves each step
// (its save reported live, in bytes and files, then in words), and
// template:NAME makes sandboxes with its files, its env and its start
// command already answering; the sandbox made from it is named as a user
// of the template until it is removed, and its snapshot as needed by it.
func TestTemplatesGvisor(t *testing.T) {
	testenv.RequiresRoot(t)
	runsc := testenv.RequiresRunsc(t, gvisor.DefaultRunsc())
	dir := t.TempDir()
	exe := buildExecutor(t, dir)
	backend, err := gvisor.New(filepath.Join(dir, "runsc"), gvisor.WithBinary(runsc))
	if err != nil {
		t.Fatal(err)
	}
	m := lifecycleManager(t, dir, exe, "gvisor", backend)
	store, err := template.NewStore(filepath.Join(dir, "templates"))
	if err != nil {
		t.Fatal(err)
	}
	m.UseTemplates(store)
	m.AddSnapshotUsers(store)
	store.UseBy(m.TemplateUsers)
	b := &template.Builder{Store: store, Sandboxes: TemplateBuilds{M: m}}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var mu sync.Mutex
	var phases []string
	tm, err := b.Build(ctx, "acme", template.Spec{Name: "web", From: "busybox", Steps: []template.Step{
		{Kind: template.StepRun, Text: "mkdir -p /www && head -c 4194304 /dev/zero > /www/big && echo hi > /www/index.html"},
		{Kind: template.StepEnv, Text: "GREETING=hello"},
	}, Start: "httpd -f -p 8080 -h /www", Ready: "wget -q -O- http://127.0.0.1:8080/"}, func(p template.Progress) {
		if p.Sub != nil {
			mu.Lock()
			phases = append(phases, p.Sub.Phase+"/"+p.Sub.Item)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(phases, PhaseWorkspace+"/saving") || !slices.Contains(phases, template.PhaseSnapshot+"/"+template.ItemSaved) {
		t.Errorf("the save was not reported live and in words: %q", phases)
	}
	info, err := m.Create(ctx, "acme", sandbox.Spec{Image: "template:web"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(context.Background(), "acme", info.ID)
	if info.Origin != "template:web" || info.Workspace != tm.Snapshot {
		t.Errorf("origin %q workspace %q, want template:web on %s", info.Origin, info.Workspace, tm.Snapshot)
	}
	c, err := m.Client(ctx, "acme", info.ID)
	if err != nil {
		t.Fatal(err)
	}
	out, _, exit, err := c.Run(ctx, "sh", "-c", `wget -q -O- http://127.0.0.1:8080/ && echo "$GREETING"`)
	if err != nil || exit.ExitCode != 0 || string(out) != "hi\nhello\n" {
		t.Errorf("first exec: %q, %v, %v; want the server's page and the env", out, exit, err)
	}
	if err := store.Delete("acme", "web"); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "sandbox:"+info.ID) {
		t.Errorf("delete of a template in use: %v", err)
	}
	if who := m.neededBy("acme", tm.Snapshot); !slices.Contains(who, "template:web") {
		t.Errorf("the template's snapshot is needed by %q, want template:web among them", who)
	}
	if _, err := m.Create(ctx, "beta", sandbox.Spec{Image: "template:web"}, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another tenant's create from it: %v, want not found", err)
	}
	if err := m.Delete(ctx, "acme", info.ID); err != nil {
		t.Fatal(err)
	}
	if err := store.Delete("acme", "web"); err != nil {
		t.Errorf("delete once no sandbox uses it: %v", err)
	}
}
