package executor_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"testing"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/executor"
)

// BenchmarkExecTrue is the round trip of running `true`: request, fork and
// exec, exit, reaping and the Exited event, through a real unix socket.
func BenchmarkExecTrue(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	req := &executorv1.ExecRequest{Argv: []string{"/bin/true"}}
	b.ReportAllocs()
	for b.Loop() {
		exit, err := e.c.Exec(ctx, req, nil)
		if err != nil || exit.ExitCode != 0 {
			b.Fatal(exit, err)
		}
	}
}

// BenchmarkExecTrueParallel runs `true` from several clients at once.
func BenchmarkExecTrueParallel(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	b.RunParallel(func(pb *testing.PB) {
		req := &executorv1.ExecRequest{Argv: []string{"/bin/true"}}
		for pb.Next() {
			if _, err := e.c.Exec(ctx, req, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

const benchSize = 100 << 20

// tarStream is a tar of one file of size zero bytes, generated as it is read.
func tarStream(b *testing.B, size int64) io.Reader {
	var hdr bytes.Buffer
	tw := tar.NewWriter(&hdr)
	if err := tw.WriteHeader(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Mode: 0o644, Size: size}); err != nil {
		b.Fatal(err)
	}
	tw.Flush()
	pad := (512 - size%512) % 512
	return io.MultiReader(&hdr, io.LimitReader(zeros{}, size+pad+1024))
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// BenchmarkUpload100MiB streams a 100 MiB tar into the sandbox's disk.
func BenchmarkUpload100MiB(b *testing.B) {
	e := newEnv(b, func(c *executor.Config) {
		if d := os.Getenv("BENCH_ROOT"); d != "" {
			c.Root = d
		}
	})
	ctx := context.Background()
	b.SetBytes(benchSize)
	for b.Loop() {
		resp, err := e.c.Upload(ctx, "/", tarStream(b, benchSize))
		if err != nil || resp.Bytes != benchSize {
			b.Fatal(resp, err)
		}
	}
}

// BenchmarkDownload100MiB streams a tar of a 100 MiB file out.
func BenchmarkDownload100MiB(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	f, err := os.Create(e.host("big"))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(f, io.LimitReader(zeros{}, benchSize)); err != nil {
		b.Fatal(err)
	}
	f.Close()
	b.SetBytes(benchSize)
	for b.Loop() {
		if _, err := e.c.Download(ctx, "/big", io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExecOutput is exec's output throughput: a command writing 64 MiB
// to stdout, streamed to a client that reads it all.
func BenchmarkExecOutput(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	const size = 64 << 20
	req := &executorv1.ExecRequest{Argv: []string{"head", "-c", "67108864", "/dev/zero"}}
	b.SetBytes(size)
	for b.Loop() {
		var got int
		exit, err := e.c.Exec(ctx, req, func(ev *executorv1.ExecEvent) { got += len(ev.GetStdout()) })
		if err != nil || exit.ExitCode != 0 || got != size {
			b.Fatal(exit, err, got)
		}
	}
}
