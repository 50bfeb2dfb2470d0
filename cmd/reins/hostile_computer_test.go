package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/errdefs"
)

// withSize rewrites a PNG's header to claim w x h (its pixels stay what
// they were): what a sandbox can send to make a decoder allocate.
func withSize(data []byte, w, h uint32) []byte {
	out := bytes.Clone(data)
	// signature (8), IHDR length (4), "IHDR" (4), width, height ...
	binary.BigEndian.PutUint32(out[16:], w)
	binary.BigEndian.PutUint32(out[20:], h)
	binary.BigEndian.PutUint32(out[29:], crc32.ChecksumIEEE(out[12:29]))
	return out
}

// A screenshot is the sandbox's bytes: one that is not a PNG, whose
// header says another size than the answer, or a size past a screen's
// (a decompression bomb's header) is refused before a file is written,
// having decoded its header only.
func TestHostileScreenshot(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	good := testPNG(t, 64, 32)
	for _, tc := range []struct {
		what string
		resp *executorv1.ComputerResponse
	}{
		{"not a PNG", &executorv1.ComputerResponse{Png: []byte("GIF89a and more"), Width: 64, Height: 32}},
		{"another size than it says", &executorv1.ComputerResponse{Png: good, Width: 1280, Height: 800}},
		{"a bomb's header", &executorv1.ComputerResponse{Png: withSize(good, 1<<20, 1<<20), Width: 1 << 20, Height: 1 << 20}},
		{"a header past the bounds, as it says", &executorv1.ComputerResponse{Png: withSize(good, 5000, 32), Width: 5000, Height: 32}},
	} {
		var out, errOut bytes.Buffer
		err := printComputer(context.Background(), &out, &errOut, "sb1", &executorv1.ComputerRequest{Action: "screenshot"}, tc.resp, computerFlags{out: "x.png"})
		if !errors.Is(err, errdefs.ErrInternal) {
			t.Errorf("%s: %v; want it refused", tc.what, err)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 || out.Len() != 0 {
			t.Errorf("%s: %d files written, %q printed", tc.what, len(ents), out.String())
		}
	}
}

// oversized answers a computer call with a screenshot that does not
// end (no length told up front): what the client reads is its bound.
func oversized(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/proto")
	w.WriteHeader(http.StatusOK)
	// Field 1 (png), bytes, 16 MiB more than the bound.
	const n = client.MaxComputerAnswer + 16<<20
	w.Write(protowire.AppendTag(nil, 1, protowire.BytesType))
	w.Write(protowire.AppendVarint(nil, n))
	chunk := make([]byte, 1<<20)
	for range n >> 20 {
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
}

// The answer of a computer call is bounded by the client: an endless
// screenshot is refused, not read into memory.
func TestHostileComputerAnswerBounded(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(oversized))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()
	cl := client.New(srv.URL, "tok")
	defer cl.Close()
	resp, err := cl.Sandbox("sb1").Computer(context.Background(), &executorv1.ComputerRequest{Action: "screenshot"})
	if err == nil {
		t.Fatalf("an answer of %d bytes was taken", len(resp.Png))
	}
	t.Logf("refused: %v", err)
}
