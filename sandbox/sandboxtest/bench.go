package sandboxtest

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/oci"
)

// BenchStart measures, on backend, Start (until the init runs), Status and
// Delete of a busybox `sleep` sandbox, and beside it the floor it is
// compared with: raw `<raw...> run` of the same bundle running /bin/true,
// timed with exec.Command. raw is the runtime binary and its global flags
// (e.g. "runsc", "--network=none"); --root and the bundle are added. It
// reports ms/start, ms/start-delete, ms/raw-run and the ratio
// start-delete/raw-run.
func BenchStart(b *testing.B, backend sandbox.Backend, raw ...string) {
	rootfs := b.TempDir()
	BusyboxRootfs(b, rootfs)
	ctx := context.Background()
	var start, total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		bd := sandbox.Bundle{ID: NewID("bench"), Dir: b.TempDir(), Rootfs: rootfs, Args: []string{"sleep", "1000"}}
		t0 := time.Now()
		if _, err := backend.Start(ctx, bd); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		st, err := backend.Status(ctx, bd.ID)
		if err != nil || !st.Running {
			b.Fatalf("Status = %+v, %v; want running", st, err)
		}
		if err := backend.Delete(ctx, bd.ID); err != nil {
			b.Fatal(err)
		}
		start += t1.Sub(t0)
		total += time.Since(t0)
	}
	b.StopTimer()
	rawRun := rawRuns(b, rootfs, b.N, raw)
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 / n }
	b.ReportMetric(ms(start), "ms/start")
	b.ReportMetric(ms(total), "ms/start-delete")
	b.ReportMetric(ms(rawRun), "ms/raw-run")
	b.ReportMetric(float64(total)/float64(rawRun), "start-delete/raw-run")
}

// rawRuns times n runs of `<raw> --root R run --bundle B id` of /bin/true.
func rawRuns(b *testing.B, rootfs string, n int, raw []string) time.Duration {
	dir, root := b.TempDir(), b.TempDir()
	spec, err := oci.Spec(sandbox.Bundle{ID: "raw", Rootfs: rootfs, Args: []string{"/bin/true"}})
	if err != nil {
		b.Fatal(err)
	}
	spec.Linux.CgroupsPath = ""
	js, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), js, 0o644); err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for i := 0; i < n; i++ {
		args := append(append([]string{"--root", root}, raw[1:]...), "run", "--bundle", dir, NewID("raw"))
		cmd := exec.Command(raw[0], args...)
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %v\n%s", cmd.Args, err, out)
		}
		total += time.Since(t0)
	}
	return total
}
