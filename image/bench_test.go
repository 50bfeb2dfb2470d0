package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	"golang.org/x/sys/unix"
)

// benchLayer is a ~100 MiB layer: 48 incompressible 1.5 MiB files and
// 2,400 small text files in 60 directories, as a tar and gzipped.
func benchLayer(b *testing.B) (tarBlob, gzBlob []byte) {
	b.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	write := func(name string, body []byte) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg, ModTime: testTime}); err != nil {
			b.Fatal(err)
		}
		tw.Write(body)
	}
	big := make([]byte, 3<<19)
	for i := range 48 {
		for j := range big {
			big[j] = byte(rng.Uint32())
		}
		write(fmt.Sprintf("blobs/big-%02d", i), big)
	}
	small := []byte(strings.Repeat("some source code, more or less compressible\n", 280))
	for d := range 60 {
		tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("src/d%02d/", d), Mode: 0o755, Typeflag: tar.TypeDir, ModTime: testTime})
		for f := range 40 {
			write(fmt.Sprintf("src/d%02d/f%02d.go", d, f), small)
		}
	}
	tw.Close()
	tarBlob = buf.Bytes()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(tarBlob)
	zw.Close()
	return tarBlob, gz.Bytes()
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// BenchmarkUnpack100MiB unpacks a ~100 MiB layer, from a plain tar and
// from gzip, onto the disk of the test's temporary directory and, when
// there is one, onto a tmpfs (/dev/shm), which shows our own cost without
// the disk's.
func BenchmarkUnpack100MiB(b *testing.B) {
	tarBlob, gzBlob := benchLayer(b)
	diffID := digestOf(tarBlob)
	places := map[string]string{"disk": b.TempDir()}
	var st unix.Statfs_t
	if unix.Statfs("/dev/shm", &st) == nil && st.Type == unix.TMPFS_MAGIC {
		dir, err := os.MkdirTemp("/dev/shm", "reins-bench-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		places["tmpfs"] = dir
	}
	for _, place := range []string{"disk", "tmpfs"} {
		base, ok := places[place]
		if !ok {
			continue
		}
		for _, bc := range []struct {
			name   string
			blob   []byte
			digest string
		}{
			{"tar", tarBlob, ""},
			{"gzip", gzBlob, digestOf(gzBlob)},
		} {
			b.Run(place+"/"+bc.name, func(b *testing.B) {
				b.SetBytes(int64(len(tarBlob)))
				src := layerSource{diffID: diffID, digest: bc.digest, open: func() (io.ReadCloser, error) {
					return io.NopCloser(bytes.NewReader(bc.blob)), nil
				}}
				i := 0
				for b.Loop() {
					dir := filepath.Join(base, fmt.Sprint(i))
					i++
					if err := os.Mkdir(dir, 0o755); err != nil {
						b.Fatal(err)
					}
					if _, err := unpackVerified(context.Background(), src, dir, func(Progress) {}); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					os.RemoveAll(dir)
					b.StartTimer()
				}
			})
		}
	}
}
