package mcp_test

import (
	"archive/tar"
	"context"
	"os"
	"path/filepath"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reinsdev/reins/server/mcp"
)

// TestHostileMCPDownloadLyingName: the name a download lands under in
// local_dir is the one the user asked for, not one a modified executor's
// Stat answers: asked for /work/report with overwrite, a sandbox that
// says it is /home/user/.bashrc must not replace local_dir/.bashrc.
func TestHostileMCPDownloadLyingName(t *testing.T) {
	dest := t.TempDir()
	rc := filepath.Join(dest, ".bashrc")
	if err := os.WriteFile(rc, []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb := &fakeSandbox{id: "0123456789ab", statPath: "/home/user/.bashrc",
		tarBytes: tarOf(t, &tar.Header{Name: ".bashrc", Typeflag: tar.TypeReg, Mode: 0o644})}
	cs := connectLocal(t, newFake(t, sb), mcp.Options{Local: true})
	r, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "download", Arguments: map[string]any{
		"sandbox_id": sb.id, "path": "/work/report", "local_dir": dest, "overwrite": true,
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("answer (error %v): %s", r.IsError, contentText(r))
	if data, _ := os.ReadFile(rc); string(data) != "mine\n" {
		t.Fatalf("a download of /work/report replaced local_dir/.bashrc: %q", data)
	}
}
