package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/archive"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/sandbox"
)

// unary: the calls for callers without a streaming client beside the
// native ones they stand for, all through reins serve's API: RunCommand
// `true` against a streaming Exec of `true` (interleaved, so a shared
// machine's load falls on both), and a file of mib MiB written and read
// as raw bytes (PUT/GET /v1/sandboxes/{id}/files) against the native
// Connect calls (Upload of a tar stream, Download).
func (b *bench) unary(n, mib int) error {
	rec, err := b.m.Create(b.ctx, "", sandbox.Spec{Image: "busybox", Limits: sandbox.Limits{DiskBytes: int64(mib*4+256) << 20}}, nil)
	if err != nil {
		return err
	}
	defer b.m.Delete(b.ctx, "", rec.ID)
	srv := apiServer(b.m)
	defer srv.Close()
	c := client.New(srv.URL, "t")
	defer c.Close()
	sb := c.Sandbox(rec.ID)
	runTrue := func() error {
		r, err := sb.RunCommand(b.ctx, &reinsv1.RunCommandRequest{Argv: []string{"true"}})
		if err == nil && (r.ExitCode != 0 || r.Reason != "exited") {
			err = fmt.Errorf("RunCommand true: %+v", r)
		}
		return err
	}
	execTrue := func() error {
		x, err := sb.Exec(b.ctx, &executorv1.ExecRequest{Argv: []string{"true"}}, nil)
		if err == nil && (x == nil || x.ExitCode != 0) {
			err = fmt.Errorf("Exec true: %v", x)
		}
		return err
	}
	for range 10 { // warm the connections
		if err := runTrue(); err != nil {
			return err
		}
		if err := execTrue(); err != nil {
			return err
		}
	}
	var unary, stream []time.Duration
	for range n {
		for _, c := range []struct {
			call func() error
			d    *[]time.Duration
		}{{runTrue, &unary}, {execTrue, &stream}} {
			t0 := time.Now()
			if err := c.call(); err != nil {
				return err
			}
			*c.d = append(*c.d, time.Since(t0))
		}
	}
	b.add("RunCommand `true` through reins serve's API (p50)", ms(pct(unary, 50)),
		ms(pct(stream, 50))+" streaming Exec `true`, same API", ratio(pct(unary, 50), pct(stream, 50)), "≤ 1.2×")
	return b.rawFiles(sb, mib)
}

// rawFiles: mib MiB written and read back through the raw file routes and
// through the native Connect calls, each checked by its sha256.
func (b *bench) rawFiles(sb *client.Sandbox, mib int) error {
	src := filepath.Join(b.dir, "unary-payload")
	if err := writeRandom(src, int64(mib)<<20); err != nil {
		return err
	}
	defer os.Remove(src)
	want, err := fileSHA(src)
	if err != nil {
		return err
	}
	size := float64(mib)
	rate := func(d time.Duration) float64 { return size / d.Seconds() }

	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	t0 := time.Now()
	if err := sb.WriteRaw(b.ctx, "/workspace/raw/payload", f, int64(mib)<<20); err != nil {
		return err
	}
	rawPut := time.Since(t0)
	t0 = time.Now()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(archive.Write(pw, src)) }()
	_, err = sb.Upload(b.ctx, "/workspace/native", pr)
	pr.Close()
	if err != nil {
		return err
	}
	nativePut := time.Since(t0)

	t0 = time.Now()
	r, err := sb.ReadRaw(b.ctx, "/workspace/raw/payload")
	if err != nil {
		return err
	}
	got, err := readerSHA(r)
	r.Close()
	if err != nil {
		return err
	}
	rawGet := time.Since(t0)
	if got != want {
		return fmt.Errorf("the file read through the raw route differs from the one written")
	}
	t0 = time.Now()
	got, err = tarFileSHA(func(w io.Writer) error {
		_, err := sb.Download(b.ctx, "/workspace/native/unary-payload", w)
		return err
	})
	if err != nil {
		return err
	}
	nativeGet := time.Since(t0)
	if got != want {
		return fmt.Errorf("the file downloaded through the native call differs from the one uploaded")
	}
	b.add(fmt.Sprintf("raw PUT %d MiB through reins serve's API (MiB/s)", mib), fmt.Sprintf("%.0f", rate(rawPut)),
		fmt.Sprintf("%.0f native Upload (tar stream), same API", rate(nativePut)), rate(rawPut)/rate(nativePut), "≥ 1.0×")
	b.add(fmt.Sprintf("raw GET %d MiB through reins serve's API (MiB/s)", mib), fmt.Sprintf("%.0f", rate(rawGet)),
		fmt.Sprintf("%.0f native Download (tar stream), same API", rate(nativeGet)), rate(rawGet)/rate(nativeGet), "≥ 1.0×")
	return nil
}
