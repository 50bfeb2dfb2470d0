package mcp_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reinsdev/reins/server/mcp"
)

// TestUploadLocalBound: a stdio upload stops at MaxLocal bytes of tar and
// says so, naming what to use instead; one under it goes through whole.
func TestUploadLocalBound(t *testing.T) {
	sb := &fakeSandbox{id: "0123456789ab"}
	cs := connectLocal(t, newFake(t, sb), mcp.Options{Local: true, MaxLocal: 64 << 10})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "small"), make([]byte, 10<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, 100<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "upload", Arguments: map[string]any{
		"sandbox_id": sb.id, "local_path": filepath.Join(dir, "small"), "dest": "/work"}})
	if err != nil || r.IsError {
		t.Fatalf("a small upload: %v %s", err, contentText(r))
	}
	if sb.uploaded < 10<<10 {
		t.Fatalf("the sandbox received %d bytes of a 10 KiB file's tar", sb.uploaded)
	}
	msg := toolError(t, cs, "upload", map[string]any{"sandbox_id": sb.id, "local_path": filepath.Join(dir, "big"), "dest": "/work"})
	if !strings.Contains(msg, "more than 65536 bytes") || !strings.Contains(msg, "reins sandbox cp") {
		t.Fatalf("an upload over the bound: %s", msg)
	}
}
