package executor_test

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor"
	"github.com/reinsdev/reins/executor/client"
)

func withStaging(c *executor.Config) { c.StagingDir = executor.StagingDir }

// hostClient is a client that sees the executor's root as the host would
// see a sandbox's root filesystem.
func (e *testEnv) hostClient() *client.Client {
	c, err := client.Dial(context.Background(), e.sock, testToken, client.WithCallTimeout(20*time.Second), client.WithHostRoot(e.root))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

func stagingEmpty(t *testing.T, e *testEnv) {
	t.Helper()
	ents, err := os.ReadDir(e.host(executor.StagingDir))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Errorf("the staging directory keeps %d entries after the transfer", len(ents))
	}
}

func TestStageLinksAndPlaceMoves(t *testing.T) {
	e := newEnv(t, withStaging)
	ctx := ctxT(t)
	e.writeHost("w/f.txt", "staged\n")
	name := "0123456789abcdef0123456789abcdef"
	resp, err := e.c.RPC().Stage(ctx, connect.NewRequest(&executorv1.StageRequest{Path: "/w/f.txt", Name: name}))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Msg.Size != 7 || resp.Msg.Mode != 0o644 {
		t.Errorf("Stage says size %d mode %o, want 7 0644", resp.Msg.Size, resp.Msg.Mode)
	}
	var a, b os.FileInfo
	a, _ = os.Stat(e.host("w/f.txt"))
	b, err = os.Stat(e.host(executor.StagingDir + "/" + name))
	if err != nil || !os.SameFile(a, b) {
		t.Fatalf("the staged name is not a link to the file: %v", err)
	}
	// Place moves it (here: back under another name), with the mode asked.
	if _, err := e.c.RPC().Place(ctx, connect.NewRequest(&executorv1.PlaceRequest{Name: name, Path: "/w/new/g.txt", Mode: 0o600})); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(e.host("w/new/g.txt"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("placed file: %v %v", fi, err)
	}
	stagingEmpty(t, e)

	for _, tc := range []struct {
		path, name string
		kind       error
	}{
		{"/w", name, errdefs.ErrFailedPrecondition},              // a directory
		{"/w/missing", name, errdefs.ErrNotFound},                // nothing there
		{"/w/f.txt", "../../w/evil", errdefs.ErrInvalidArgument}, // a name that walks
		{"/w/f.txt", "ABCDEF", errdefs.ErrInvalidArgument},
	} {
		_, err := e.c.RPC().Stage(ctx, connect.NewRequest(&executorv1.StageRequest{Path: tc.path, Name: tc.name}))
		wantKind(t, errdefs.FromConnect(err), tc.kind)
	}
	e.writeHost(".reins/xfer/"+name, "x")
	must(t, os.Mkdir(e.host("w/adir"), 0o755))
	_, err = e.c.RPC().Place(ctx, connect.NewRequest(&executorv1.PlaceRequest{Name: name, Path: "/w/adir"}))
	wantKind(t, errdefs.FromConnect(err), errdefs.ErrInvalidArgument, "directory")
}

func TestStagingOffWithoutDir(t *testing.T) {
	e := newEnv(t)
	_, err := e.c.RPC().Stage(ctxT(t), connect.NewRequest(&executorv1.StageRequest{Path: "/", Name: "0123456789abcdef0123456789abcdef"}))
	wantKind(t, errdefs.FromConnect(err), errdefs.ErrFailedPrecondition, "staging")
}

// TestStagedCopy: single files go through the staging directory both ways
// and arrive whole, with their mode and time; directories and a staging
// directory the sandbox broke fall back to tar streams.
func TestStagedCopy(t *testing.T) {
	e := newEnv(t, withStaging)
	c := e.hostClient()
	ctx := ctxT(t)
	data := make([]byte, 3<<20+5)
	rand.NewChaCha8([32]byte{7}).Read(data)
	src := filepath.Join(t.TempDir(), "blob.bin")
	must(t, os.WriteFile(src, data, 0o640))
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	must(t, os.Chtimes(src, old, old))
	resp, err := c.CopyTo(ctx, src, "/up")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Files != 1 || resp.Bytes != uint64(len(data)) {
		t.Errorf("CopyTo says %d files, %d bytes", resp.Files, resp.Bytes)
	}
	got, err := os.ReadFile(e.host("up/blob.bin"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("uploaded content differs (%v)", err)
	}
	fi, _ := os.Stat(e.host("up/blob.bin"))
	if fi.Mode().Perm() != 0o640 || !fi.ModTime().Equal(old) {
		t.Errorf("uploaded file: mode %v time %v, want 0640 %v", fi.Mode(), fi.ModTime(), old)
	}
	stagingEmpty(t, e)

	dst := t.TempDir()
	if n, size, err := c.CopyFrom(ctx, "/up/blob.bin", dst); err != nil || n != 1 || size != int64(len(data)) {
		t.Fatalf("CopyFrom: %d files %d bytes: %v", n, size, err)
	}
	got, err = os.ReadFile(filepath.Join(dst, "blob.bin"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("downloaded content differs (%v)", err)
	}
	fi, _ = os.Stat(filepath.Join(dst, "blob.bin"))
	if fi.Mode().Perm() != 0o640 || !fi.ModTime().Equal(old) {
		t.Errorf("downloaded file: mode %v time %v, want 0640 %v", fi.Mode(), fi.ModTime(), old)
	}
	stagingEmpty(t, e)

	// A directory goes as a tar stream.
	if n, _, err := c.CopyFrom(ctx, "/up", t.TempDir()); err != nil || n != 1 {
		t.Fatalf("CopyFrom of a directory: %d files: %v", n, err)
	}
	// The sandbox replaced its staging directory with a symlink: the host
	// does not follow it, and the transfers still work over the socket.
	must(t, os.Remove(e.host(executor.StagingDir)))
	decoy := t.TempDir()
	must(t, os.Symlink(decoy, e.host(executor.StagingDir)))
	if _, err := c.CopyTo(ctx, src, "/up2"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.CopyFrom(ctx, "/up2/blob.bin", t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(decoy); len(ents) != 0 {
		t.Errorf("the host wrote %d files where the symlink pointed", len(ents))
	}
	if got, _ := os.ReadFile(e.host("up2/blob.bin")); !bytes.Equal(got, data) {
		t.Error("the fallback upload's content differs")
	}
}

// TestStagedClosedWithClient: Close closes the staged files a transfer
// holds open — a download cut in the middle fails as the sandbox having
// stopped — and a closed client opens no more.
func TestStagedClosedWithClient(t *testing.T) {
	e := newEnv(t, withStaging)
	c := e.hostClient()
	ctx := ctxT(t)
	data := make([]byte, 1<<20)
	must(t, os.WriteFile(e.host("big"), data, 0o644))
	r, ok, err := c.StagedDownload(ctx, "/big")
	if err != nil || !ok {
		t.Fatalf("StagedDownload: ok %v, %v", ok, err)
	}
	defer r.Close()
	if _, err := r.Read(make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	_, err = io.Copy(io.Discard, r)
	if errdefs.Kind(err) != errdefs.ErrUnavailable {
		t.Errorf("reading on after Close: %v, want unavailable (the sandbox stopped)", err)
	}
	if _, ok, _ := c.StagedDownload(ctx, "/big"); ok {
		t.Errorf("a closed client staged a download")
	}
}
