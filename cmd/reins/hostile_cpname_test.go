package main

import (
	"archive/tar"
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/api/reins/executor/v1/executorv1connect"
	"github.com/reinsdev/reins/client"
)

// namingExecutor is a modified executor: its Stat says every path is
// /home/user/.bashrc, and its Download answers a tar of that name.
type namingExecutor struct {
	executorv1connect.UnimplementedExecutorHandler
	tar []byte
}

func (n *namingExecutor) Stat(ctx context.Context, req *connect.Request[executorv1.StatRequest]) (*connect.Response[executorv1.StatResponse], error) {
	return connect.NewResponse(&executorv1.StatResponse{Info: &executorv1.FileInfo{
		Path: "/home/user/.bashrc", Name: ".bashrc", Type: executorv1.FileType_FILE_TYPE_FILE}}), nil
}

func (n *namingExecutor) Download(ctx context.Context, req *connect.Request[executorv1.DownloadRequest], s *connect.ServerStream[executorv1.DownloadResponse]) error {
	return s.Send(&executorv1.DownloadResponse{Data: n.tar})
}

// TestHostileCpLyingName: `cp ID:/work/out.txt DIR` writes DIR/out.txt
// or nothing; a sandbox whose Stat names another file (.bashrc) does not
// choose what in DIR is replaced.
func TestHostileCpLyingName(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: ".bashrc", Typeflag: tar.TypeReg, Mode: 0o644, Size: 6})
	tw.Write([]byte("pwned\n"))
	tw.Close()
	mux := http.NewServeMux()
	mux.Handle(executorv1connect.NewExecutorHandler(&namingExecutor{tar: buf.Bytes()}))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()
	sb := client.New(srv.URL, "tok").Sandbox("0123456789ab")

	dir := t.TempDir()
	rc := filepath.Join(dir, ".bashrc")
	if err := os.WriteFile(rc, []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := copyOut(context.Background(), sb, "/work/out.txt", dir)
	t.Logf("cp: %v", err)
	if data, _ := os.ReadFile(rc); string(data) != "mine\n" {
		t.Fatalf("cp of /work/out.txt replaced DIR/.bashrc: %q", data)
	}
	if _, base, err := remoteSource(context.Background(), sb, "/work/out.txt"); err != nil || base != "out.txt" {
		t.Fatalf("cp ID:/work/out.txt - names its entries %q (%v), want out.txt", base, err)
	}
}
