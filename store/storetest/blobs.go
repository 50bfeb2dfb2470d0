package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/store"
)

// RunBlobs runs the suite of store.Blobs. newBlobs must return a new, empty
// blob store each call and arrange for any cleanup with t.Cleanup.
func RunBlobs(t *testing.T, newBlobs func(t *testing.T) store.Blobs) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b store.Blobs)
	}{
		{"PutOpen", testBlobPutOpen},
		{"Empty", testBlobEmpty},
		{"Dedup", testBlobDedup},
		{"Unknown", testBlobUnknown},
		{"Malformed", testBlobMalformed},
		{"ReaderFails", testBlobReaderFails},
		{"Canceled", testBlobCanceled},
		{"Concurrent", testBlobConcurrent},
		{"Streaming", testBlobStreaming},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, newBlobs(t))
		})
	}
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func put(t *testing.T, b store.Blobs, content []byte) string {
	t.Helper()
	d, n, err := b.Put(context.Background(), bytes.NewReader(content))
	if err != nil {
		t.Fatalf("Put(%d bytes): %v", len(content), err)
	}
	if want := digestOf(content); d != want || n != int64(len(content)) {
		t.Fatalf("Put(%d bytes) = %s, %d; want %s, %d", len(content), d, n, want, len(content))
	}
	return d
}

func readBlob(t *testing.T, b store.Blobs, digest string) []byte {
	t.Helper()
	rc, err := b.Open(context.Background(), digest)
	if err != nil {
		t.Fatalf("Open(%s): %v", digest, err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", digest, err)
	}
	return got
}

func testBlobPutOpen(t *testing.T, b store.Blobs) {
	content := bytes.Repeat([]byte("screenshot\x00\xff"), 10000)
	d := put(t, b, content)
	if !bytes.Equal(readBlob(t, b, d), content) {
		t.Fatal("blob read back differs")
	}
	other := put(t, b, []byte("another"))
	if string(readBlob(t, b, other)) != "another" {
		t.Fatal("second blob read back differs")
	}
}

func testBlobEmpty(t *testing.T, b store.Blobs) {
	d := put(t, b, nil)
	if got := readBlob(t, b, d); len(got) != 0 {
		t.Fatalf("empty blob reads back %d bytes", len(got))
	}
}

func testBlobDedup(t *testing.T, b store.Blobs) {
	d1 := put(t, b, []byte("same"))
	d2 := put(t, b, []byte("same"))
	if d1 != d2 {
		t.Fatalf("same content, digests %s and %s", d1, d2)
	}
	if string(readBlob(t, b, d1)) != "same" {
		t.Fatal("blob put twice reads back wrong")
	}
}

func testBlobUnknown(t *testing.T, b store.Blobs) {
	put(t, b, []byte("present"))
	d := digestOf([]byte("absent"))
	_, err := b.Open(context.Background(), d)
	wantKind(t, "Open of an unknown digest", err, errdefs.ErrNotFound)
	if !strings.Contains(err.Error(), d) {
		t.Errorf("error %q does not name the digest", err)
	}
}

func testBlobMalformed(t *testing.T, b store.Blobs) {
	valid := digestOf([]byte("x"))
	for _, d := range []string{
		"",
		"sha256:",
		strings.TrimPrefix(valid, "sha256:"),
		"md5:" + strings.TrimPrefix(valid, "sha256:"),
		"sha256:" + strings.ToUpper(strings.TrimPrefix(valid, "sha256:")),
		valid[:len(valid)-1],
		valid + "0",
		"sha256:../../../../../../etc/passwd",
		"sha256:" + strings.Repeat("g", 64),
		"sha256:" + strings.Repeat(".", 64),
		"sha256:" + strings.Repeat("/", 64),
	} {
		_, err := b.Open(context.Background(), d)
		wantKind(t, fmt.Sprintf("Open(%q)", d), err, errdefs.ErrInvalidArgument)
	}
}

type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, errors.New("connection reset")
	}
	n := min(len(p), r.n)
	for i := range p[:n] {
		p[i] = 'x'
	}
	r.n -= n
	return n, nil
}

func testBlobReaderFails(t *testing.T, b store.Blobs) {
	_, _, err := b.Put(context.Background(), &failingReader{n: 100000})
	if err == nil {
		t.Fatal("Put from a failing reader succeeded")
	}
	// Nothing of it is stored under the digest of what it did yield.
	_, err = b.Open(context.Background(), digestOf(bytes.Repeat([]byte("x"), 100000)))
	wantKind(t, "Open of a failed Put's partial content", err, errdefs.ErrNotFound)
}

func testBlobCanceled(t *testing.T, b store.Blobs) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := b.Put(ctx, strings.NewReader("data")); err == nil {
		t.Fatal("Put with a canceled context succeeded")
	}
}

func testBlobConcurrent(t *testing.T, b store.Blobs) {
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			// Half write the same content, half their own.
			content := []byte("shared content")
			if i%2 == 1 {
				content = fmt.Appendf(nil, "own content %d", i)
			}
			d, _, err := b.Put(context.Background(), bytes.NewReader(content))
			if err != nil {
				errs <- err
				return
			}
			rc, err := b.Open(context.Background(), d)
			if err != nil {
				errs <- err
				return
			}
			defer rc.Close()
			got, err := io.ReadAll(rc)
			if err != nil || !bytes.Equal(got, content) {
				errs <- fmt.Errorf("blob %s reads back %q, %v; want %q", d, got, err, content)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// patternReader yields n bytes of a pattern without holding them.
type patternReader struct{ off, n int64 }

func (r *patternReader) Read(p []byte) (int, error) {
	if r.off >= r.n {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), r.n-r.off)]
	for i := range p {
		p[i] = byte((r.off + int64(i)) * 7 >> 3)
	}
	r.off += int64(len(p))
	return len(p), nil
}

// testBlobStreaming puts and reads back 64 MiB and checks that neither
// allocated anything like that much: blobs stream.
func testBlobStreaming(t *testing.T, b store.Blobs) {
	const size = 64 << 20
	h := sha256.New()
	if _, err := io.Copy(h, &patternReader{n: size}); err != nil {
		t.Fatal(err)
	}
	want := "sha256:" + hex.EncodeToString(h.Sum(nil))

	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	d, n, err := b.Put(context.Background(), &patternReader{n: size})
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&m1)
	if d != want || n != size {
		t.Fatalf("Put(64 MiB) = %s, %d; want %s, %d", d, n, want, size)
	}
	if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > 8<<20 {
		t.Errorf("Put of 64 MiB allocated %d MiB: it should stream", alloc>>20)
	}

	rc, err := b.Open(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	h.Reset()
	runtime.ReadMemStats(&m0)
	if _, err := io.Copy(h, rc); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&m1)
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != want {
		t.Fatalf("64 MiB blob reads back as %s, want %s", got, want)
	}
	if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > 8<<20 {
		t.Errorf("reading 64 MiB allocated %d MiB: it should stream", alloc>>20)
	}
}
