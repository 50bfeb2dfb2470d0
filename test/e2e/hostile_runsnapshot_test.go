package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/client"
)

// TestHostileRunSnapshotOfAnotherTenant: tenant beta names, as its run's
// image, the digest of a checkpoint of tenant acme's run; the lookup is
// beta's own snapshots, so its sandbox is refused as "not found" and no
// sandbox of beta ever holds acme's file.
func TestHostileRunSnapshotOfAnotherTenant(t *testing.T) {
	s := startService(t)
	acme := s.newTenant("acme")
	beta := s.newTenant("beta")
	script := writeScript(t, writeFile("/workspace/secret.txt", "acme-secret"), map[string]any{"text": "done"})
	r := s.asTenant(acme, "run", "--checkpoint-every", "1", "--model", "script:"+script, "keep a secret")
	if r.code != 0 {
		t.Fatalf("acme's run: %s", r)
	}
	var id string
	for _, line := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "run" {
			id = f[1]
		}
	}
	cps := ofType(runEvents(t, s, acme, id), reinsv1.EventType_EVENT_TYPE_CHECKPOINT)
	if len(cps) == 0 {
		t.Fatal("acme's run took no checkpoint")
	}
	digest := cps[0].GetCheckpoint().Digest

	// Through the API, as beta.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := client.New(s.url, beta)
	data, err := os.ReadFile(writeScript(t, bash("cat /workspace/secret.txt"), map[string]any{"text": "read"}))
	if err != nil {
		t.Fatal(err)
	}
	run, err := cl.StartRun(ctx, &reinsv1.RunSpec{Task: "read acme's secret", Model: "script:x", Script: string(data),
		Sandboxes: map[string]string{"default": "snapshot:" + digest}})
	if err != nil {
		t.Fatalf("beta's run was refused before it started (fine, but then say so here): %v", err)
	}
	var got *reinsv1.Run
	eventually(t, 60*time.Second, "beta's run ends", func() (bool, string) {
		got, err = cl.GetRun(ctx, run.Id)
		return err == nil && got.Status >= reinsv1.RunStatus_RUN_STATUS_SUCCEEDED, fmt.Sprint(got.GetStatus(), err)
	})
	bevs := runEvents(t, s, beta, run.Id)
	for _, ev := range bevs {
		if strings.Contains(protojson.Format(ev), "acme-secret") {
			t.Fatalf("beta's run saw acme's file: %v", ev)
		}
	}
	// The model is told the snapshot is not found (as one that never
	// was), and no sandbox is made.
	res := ofType(bevs, reinsv1.EventType_EVENT_TYPE_TOOL_RESULT)
	if len(res) != 1 || !strings.Contains(res[0].GetToolResult().Text, "not found") || strings.Contains(res[0].GetToolResult().Text, "acme") ||
		len(ofType(bevs, reinsv1.EventType_EVENT_TYPE_SANDBOX_CREATED)) != 0 {
		t.Errorf("beta's run: want its sandbox refused as not found, naming no one; events:\n%v", bevs)
	}
	// Nor can beta fork acme's run to reach its checkpoints.
	if r := s.asTenant(beta, "runs", "fork", id, "--at", fmt.Sprint(cps[0].Seq)); r.code == 0 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("beta forked acme's run: %s", r)
	}
	if ls := s.asTenant(beta, "sandbox", "ls").stdout; strings.Contains(ls, "running") {
		t.Errorf("beta has a sandbox made from acme's checkpoint:\n%s", ls)
	}
}
