package executor_test

import (
	"bytes"
	"io"
	"os"
	"testing"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
)

// TestStreamRoundTrip: WriteStream and ReadStream move a file's bytes as
// they are, larger than one message, with parents made and the mode
// given; ReadStream describes the file first.
func TestStreamRoundTrip(t *testing.T) {
	e := newEnv(t)
	data := bytes.Repeat([]byte("0123456789abcdef"), 300<<10) // 4.7 MiB
	n, err := e.c.WriteFileFrom(ctxT(t), "/a/b/f", 0o600, bytes.NewReader(data))
	if err != nil || n != int64(len(data)) {
		t.Fatalf("WriteFileFrom: %d %v", n, err)
	}
	fi, err := os.Stat(e.host("a/b/f"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the file: %v %v, want mode 0600", fi, err)
	}
	r, info, err := e.c.OpenFile(ctxT(t), "/a/b/f")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, data) || info.Size != uint64(len(data)) || info.Type != executorv1.FileType_FILE_TYPE_FILE {
		t.Errorf("read back %d bytes (%v), info %v", len(got), err, info)
	}
}
