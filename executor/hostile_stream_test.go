package executor_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
)

// TestHostileWriteStreamWithoutEnd: a stream that closes cleanly without
// its end message (a caller whose input broke) leaves the old file as it
// was and no temporary file. Without the end marker the executor would
// commit whatever arrived.
func TestHostileWriteStreamWithoutEnd(t *testing.T) {
	e := newEnv(t)
	if err := os.WriteFile(e.host("f"), []byte("original"), 0o644); err != nil {
		t.Fatal(err)
	}
	stream := e.c.RPC().WriteStream(ctxT(t))
	stream.Send(&executorv1.WriteStreamRequest{Msg: &executorv1.WriteStreamRequest_Header{Header: &executorv1.WriteStreamHeader{Path: "/f"}}})
	stream.Send(&executorv1.WriteStreamRequest{Msg: &executorv1.WriteStreamRequest_Data{Data: []byte("partial")}})
	_, err := stream.CloseAndReceive()
	wantKind(t, errdefs.FromConnect(err), errdefs.ErrCanceled, "unchanged")
	if got, _ := os.ReadFile(e.host("f")); string(got) != "original" {
		t.Errorf("the file after a stream without its end: %q", got)
	}
	if entries, _ := os.ReadDir(e.root); len(entries) != 1 {
		t.Errorf("left in the directory: %v", entries)
	}
}

// TestHostileStreamDirectory: a directory named to ReadStream or
// WriteStream is the is_directory kind, and it is left alone.
func TestHostileStreamDirectory(t *testing.T) {
	e := newEnv(t)
	os.MkdirAll(e.host("d"), 0o755)
	os.WriteFile(filepath.Join(e.host("d"), "keep"), []byte("k"), 0o644)
	_, _, err := e.c.OpenFile(ctxT(t), "/d")
	wantKind(t, err, errdefs.ErrIsDirectory, "is a directory")
	_, err = e.c.WriteFileFrom(ctxT(t), "/d", 0, strings.NewReader("x"))
	wantKind(t, err, errdefs.ErrIsDirectory, "is a directory")
	_, err = e.c.ReadLines(ctxT(t), "/d", 1, 10, 0)
	wantKind(t, err, errdefs.ErrIsDirectory)
	if got, _ := os.ReadFile(filepath.Join(e.host("d"), "keep")); string(got) != "k" {
		t.Errorf("the directory's file: %q", got)
	}
}
