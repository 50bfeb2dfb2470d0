// Command bench measures reins' sandboxes beside the baselines they are
// judged against, all in one process run, and prints each figure with its
// baseline and the ratio (these machines are noisy; ratios travel).
//
//	go run ./bench [-out docs/benchmarks.md] [-n 20] [-execs 300] [-idle 50] [-only steer,loop,egress,gateway]
//
// It needs root, the pinned runsc (make deps; gvisor.DefaultRunsc) and the
// built executor (make build).
package main

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/reinsdev/reins/agent"
	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/client"
	exclient "github.com/reinsdev/reins/executor/client"
	"github.com/reinsdev/reins/image"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/model/script"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/gvisor"
	"github.com/reinsdev/reins/sandbox/manager"
	"github.com/reinsdev/reins/sandbox/oci"
	"github.com/reinsdev/reins/sandbox/rootfs"
	"github.com/reinsdev/reins/store"
	"github.com/reinsdev/reins/store/blob"
	"github.com/reinsdev/reins/store/sqlite"
	"github.com/reinsdev/reins/tool"
)

type bench struct {
	ctx      context.Context
	dir      string
	m        *manager.Manager
	gv       *gvisor.Backend
	images   *image.Store
	busybox  *image.Image
	executor string // the built executor (host path)
	phases   *bootPhases
	rows     []row
}

// row is one line of the results table.
type row struct {
	what, ours, base string
	ratio            float64
	goal             string
}

func main() {
	oci.MaybeRunShim()
	out := flag.String("out", "", "also write the results as markdown to this file")
	n := flag.Int("n", 20, "sandboxes created for the create benchmark")
	execs := flag.Int("execs", 300, "exec round trips")
	idle := flag.Int("idle", 50, "idle sandboxes for the memory benchmark")
	mib := flag.Int("mib", 100, "MiB moved by the transfer benchmark")
	executor := flag.String("executor", "bin/reins-executor", "the built executor")
	shim := flag.String("shim", "bin/reins-shim", "the built sandbox shim (\"\": this program re-executed)")
	only := flag.String("only", "", "run only these steps (comma-separated: create,exec,transfer,unary,idle,loop,steer,ledger,egress,egress-sandbox,gateway,gateway-sandbox,ports,fork,pool,checkpoint,pause,template,workspace,suspend,computer,view,e2b,workload); with -out, only a full run writes the file")
	flag.Parse()
	if *only != "" && *out != "" {
		fmt.Fprintln(os.Stderr, "bench: -only and -out together would write a partial table; drop one")
		os.Exit(2)
	}
	if err := run(*out, *only, *shim, *n, *execs, *idle, *mib, *executor); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(out, only, shim string, n, execs, idle, mib int, executorPath string) error {
	if only == "egress" || only == "gateway" { // loopback only: no sandbox, no root
		b := &bench{}
		fmt.Fprintf(os.Stderr, "bench: %s...\n", only)
		step := func() error { return b.egress(2000, mib) }
		if only == "gateway" {
			step = func() error { return b.gateway(1000, 200) }
		}
		if err := step(); err != nil {
			return fmt.Errorf("%s: %w", only, err)
		}
		fmt.Print(b.table())
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (sandboxes); run: sudo make bench")
	}
	if only == "workspace" { // loop disks only: no sandbox
		b := &bench{ctx: context.Background()}
		fmt.Fprintf(os.Stderr, "bench: %s...\n", only)
		if err := b.workspace(); err != nil {
			return fmt.Errorf("%s: %w", only, err)
		}
		fmt.Print(b.table())
		return nil
	}
	exe, err := filepath.Abs(executorPath)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "rbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b := &bench{ctx: context.Background(), dir: dir, executor: exe, phases: &bootPhases{d: map[string][]time.Duration{}}}
	var gopts []gvisor.Option
	if shim != "" {
		p, err := filepath.Abs(shim)
		if err != nil {
			return err
		}
		gopts = append(gopts, gvisor.WithShim(p))
	}
	if b.gv, err = gvisor.New(filepath.Join(dir, "rt"), gopts...); err != nil {
		return err
	}
	if b.images, err = image.NewStore(filepath.Join(dir, "images")); err != nil {
		return err
	}
	if b.busybox, err = b.images.Resolve(b.ctx, "busybox", nil); err != nil {
		return err
	}
	b.m, err = manager.New(manager.Config{
		Dir: filepath.Join(dir, "sb"), ExecutorPath: exe,
		Backends: map[string]sandbox.Backend{"gvisor": b.gv}, DefaultBackend: "gvisor",
		Images: manager.ImageStore(b.images), CheckInterval: time.Hour,
		Gateway: benchGateway,
		Logger:  slog.New(b.phases),
	})
	if err != nil {
		return err
	}
	steps := []struct {
		name string
		fn   func() error
	}{
		{"create", func() error { return b.create(n) }},
		{"exec", func() error { return b.exec(execs) }},
		{"transfer", func() error { return b.transfer(mib) }},
		{"unary", func() error { return b.unary(execs/3, mib) }},
		{"idle", func() error { return b.idleMemory(idle) }},
		{"loop", func() error { return b.loop(200, 50, 40) }},
		{"steer", func() error { return b.steer(5000, 20) }},
		{"ledger", func() error { return b.ledger(500) }},
		{"egress", func() error { return b.egress(2000, mib) }},
		{"egress-sandbox", func() error { return b.egressSandbox(10*mib, 3) }},
		{"gateway", func() error { return b.gateway(1000, 200) }},
		{"ports", func() error { return b.ports(execs, mib) }},
		{"gateway-sandbox", func() error { return b.gatewayTunnel(execs) }},
		{"fork", func() error { return b.fork(10, 3) }},
		{"pool", func() error { return b.pool(n) }},
		{"checkpoint", func() error { return b.checkpoint(20, 3) }},
		{"pause", func() error { return b.pause(3, 10, 200) }},
		{"template", func() error { return b.template(5) }},
		{"suspend", func() error { return b.suspend(1, 100, 1024) }},
		{"workspace", b.workspace},
		{"computer", func() error { return b.computer(20) }},
		{"view", func() error { return b.view(5, 20) }},
		{"e2b", func() error { return b.e2bEndpoint(execs, mib) }},
	}
	if *workloadOnly {
		steps = steps[:0]
	}
	if *workloadOn || *workloadOnly {
		steps = append(steps, struct {
			name string
			fn   func() error
		}{"workload", b.workload})
	}
	for _, s := range steps {
		if only != "" && !slices.Contains(strings.Split(only, ","), s.name) {
			continue
		}
		fmt.Fprintf(os.Stderr, "bench: %s...\n", s.name)
		if err := s.fn(); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	table := b.table()
	if len(b.rows) > 0 {
		fmt.Print(table)
	}
	fmt.Print(workTable)
	if out == "" {
		return nil
	}
	if !*workloadOnly {
		if err := writeDoc(out, b.gv.Version(), table); err != nil {
			return err
		}
	}
	return writeWorkDoc(out, b.gv.Version())
}

// stores opens a fresh SQLite store and blob store under the bench's
// directory, in name.
func (b *bench) stores(name string) (*sqlite.Store, *blob.Store, error) {
	dir := filepath.Join(b.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	st, err := sqlite.Open(filepath.Join(dir, "reins.db"))
	if err != nil {
		return nil, nil, err
	}
	blobs, err := blob.Open(filepath.Join(dir, "blobs"))
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return st, blobs, nil
}

// busybox1 makes a busybox sandbox and its executor's client; remove
// deletes it.
func (b *bench) busybox1() (sandbox.Info, *exclient.Client, func(), error) {
	return b.sandbox1(sandbox.Spec{Image: "busybox"})
}

// sandbox1 is busybox1 for spec.
func (b *bench) sandbox1(spec sandbox.Spec) (sandbox.Info, *exclient.Client, func(), error) {
	rec, err := b.m.Create(b.ctx, "", spec, nil)
	if err != nil {
		return rec, nil, nil, err
	}
	remove := func() { b.m.Delete(b.ctx, "", rec.ID) }
	ex, err := b.m.Client(b.ctx, "", rec.ID)
	if err != nil {
		remove()
		return rec, nil, nil, err
	}
	return rec, ex, remove, nil
}

func (b *bench) add(what, ours, base string, ratio float64, goal string) {
	b.rows = append(b.rows, row{what, ours, base, ratio, goal})
	fmt.Fprintf(os.Stderr, "  %s: %s vs %s (%.2f×)\n", what, ours, base, ratio)
}

// create: create → first exec of `true` through the executor, beside raw
// `runsc run` of /bin/true, interleaved round by round so that the load of
// a shared machine falls on all alike. Two raw bundles: the bare busybox
// layer (no mounts, no cgroup: runsc's floor), and the sandbox's own
// bundle (its bind mounts, its cgroup with the same limits) with /bin/true
// for the executor: what reins adds on top of what it asks runsc to run.
func (b *bench) create(n int) error {
	var ours, bare, same []time.Duration
	var limits *sandbox.Limits
	for i := 0; i < n; i++ {
		d, err := b.rawRun(fmt.Sprintf("bare%d", i), nil)
		if err != nil {
			return err
		}
		bare = append(bare, d)
		if limits != nil {
			d, err := b.rawRun(fmt.Sprintf("same%d", i), limits)
			if err != nil {
				return err
			}
			same = append(same, d)
		}
		t0 := time.Now()
		rec, err := b.m.Create(b.ctx, "", sandbox.Spec{Image: "busybox"}, nil)
		if err != nil {
			return err
		}
		ex, err := b.m.Client(b.ctx, "", rec.ID)
		if err != nil {
			return err
		}
		t1 := time.Now()
		if err := execTrue(b.ctx, ex); err != nil {
			return err
		}
		ours = append(ours, time.Since(t0))
		b.phases.add("first_exec", time.Since(t1))
		limits = &rec.Spec.Limits
		if err := b.m.Delete(b.ctx, "", rec.ID); err != nil {
			return err
		}
	}
	po, pb, ps := pct(ours, 50), pct(bare, 50), pct(same, 50)
	b.add("create → first exec (p50)", ms(po), ms(ps)+" raw `runsc run` true, the sandbox's bundle (its mounts, cgroup, limits)", ratio(po, ps), "≤ 1.2×")
	b.add("create → first exec (p50), bare", ms(po), ms(pb)+" raw `runsc run` true, bare busybox bundle", ratio(po, pb), "")
	var parts []string
	for _, k := range []string{"mount", "prepare", "backend_start", "executor_ready", "first_exec"} {
		if d := b.phases.d[k]; len(d) > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", strings.ReplaceAll(k, "_", " "), ms(pct(d, 50))))
		}
	}
	// The ratio: the backend's start alone (shim, `runsc run --detach`)
	// against the raw run of the same bundle.
	b.add("create phases (p50 each); ratio: backend start / raw", strings.Join(parts, ", "), ms(ps)+" raw `runsc run` true, the sandbox's bundle",
		ratio(pct(b.phases.d["backend_start"], 50), ps), "")
	return nil
}

// bootPhases collects the durations the manager logs for each sandbox
// boot (its "sandbox boot" debug record), for the create breakdown.
type bootPhases struct {
	mu sync.Mutex
	d  map[string][]time.Duration
}

func (p *bootPhases) add(k string, d time.Duration) {
	p.mu.Lock()
	p.d[k] = append(p.d[k], d)
	p.mu.Unlock()
}

func (p *bootPhases) Enabled(context.Context, slog.Level) bool { return true }
func (p *bootPhases) WithAttrs([]slog.Attr) slog.Handler       { return p }
func (p *bootPhases) WithGroup(string) slog.Handler            { return p }
func (p *bootPhases) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "sandbox boot" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Value.Kind() == slog.KindDuration {
			p.add(a.Key, a.Value.Duration())
		}
		return true
	})
	return nil
}

// rawRun times `runsc run` of /bin/true in busybox: bare (limits nil), or
// with the mounts and cgroup limits a reins sandbox gets.
func (b *bench) rawRun(id string, limits *sandbox.Limits) (time.Duration, error) {
	bundle := filepath.Join(b.dir, "raw", id)
	runDir := filepath.Join(bundle, "run")
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return 0, err
	}
	defer os.RemoveAll(bundle)
	bd := sandbox.Bundle{ID: id, Rootfs: b.busybox.Layers[0], Args: []string{"/bin/true"}}
	if limits != nil {
		bd.Limits = *limits
		bd.Mounts = []sandbox.Mount{
			{Source: b.executor, Target: manager.ExecutorTarget, ReadOnly: true},
			{Source: runDir, Target: manager.RunTarget},
		}
	}
	spec, err := oci.Spec(bd)
	if err != nil {
		return 0, err
	}
	if limits == nil {
		spec.Linux.CgroupsPath = ""
	}
	spec.Root.Readonly = true
	js, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), js, 0o644); err != nil {
		return 0, err
	}
	args := append([]string{"--root", filepath.Join(b.dir, "rawroot")}, gvisor.GlobalFlags...)
	args = append(args, "run", "--bundle", bundle, id)
	t0 := time.Now()
	if o, err := exec.Command(gvisor.DefaultRunsc(), args...).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("runsc run: %v: %s", err, o)
	}
	return time.Since(t0), nil
}

func execTrue(ctx context.Context, ex *exclient.Client) error {
	exited, err := ex.Exec(ctx, &executorv1.ExecRequest{Argv: []string{"true"}}, nil)
	if err != nil {
		return err
	}
	if exited == nil || exited.ExitCode != 0 {
		return fmt.Errorf("true did not exit 0: %v", exited)
	}
	return nil
}

// exec: round trip of `true` through the executor (direct from a Go client,
// and through reins serve's API), beside `runsc exec … true`.
func (b *bench) exec(n int) error {
	rec, ex, remove, err := b.busybox1()
	if err != nil {
		return err
	}
	defer remove()
	var raw, direct, api []time.Duration
	for i := 0; i < n/5; i++ {
		args := append([]string{"--root", filepath.Join(b.dir, "rt", "runtime")}, gvisor.GlobalFlags...)
		args = append(args, "exec", rec.ID, "/bin/true")
		t0 := time.Now()
		if o, err := exec.Command(gvisor.DefaultRunsc(), args...).CombinedOutput(); err != nil {
			return fmt.Errorf("runsc exec: %v: %s", err, o)
		}
		raw = append(raw, time.Since(t0))
	}
	for i := 0; i < 10; i++ { // warm the connection
		execTrue(b.ctx, ex)
	}
	thr0 := cpuThrottled(rec.ID)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := execTrue(b.ctx, ex); err != nil {
			return err
		}
		direct = append(direct, time.Since(t0))
	}
	throttled := cpuThrottled(rec.ID) - thr0
	srv := apiServer(b.m)
	defer srv.Close()
	sb := client.New(srv.URL, "t").Sandbox(rec.ID)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		x, err := sb.Exec(b.ctx, &executorv1.ExecRequest{Argv: []string{"true"}}, nil)
		if err != nil || x == nil || x.ExitCode != 0 {
			return fmt.Errorf("exec via API: %v %v", x, err)
		}
		api = append(api, time.Since(t0))
	}
	p50, p99 := pct(direct, 50), pct(direct, 99)
	b.add("exec `true`, Go client → executor (p50)", ms(p50), ms(pct(raw, 50))+" `runsc exec` true", ratio(p50, pct(raw, 50)), "")
	b.add("exec `true`, Go client → executor (p50) against E2B envd", ms(p50),
		fmt.Sprintf("%.1f ms E2B envd, bottom of 12.8–13.8 measured in this gVisor (issue 8; not this run)", envdExecP50),
		float64(p50)/1e6/envdExecP50, "≤ 0.5×")
	b.add(fmt.Sprintf("exec `true`, Go client → executor (p99); 1 CPU, CFS-throttled %d times in %d execs", throttled, n),
		ms(p99), ms(p50)+" its own p50", ratio(p99, p50), "≤ 3×")
	if err := b.execTwoCPUs(n); err != nil {
		return err
	}
	b.add("exec `true` through reins serve's API (p50)", ms(pct(api, 50)),
		ms(pct(raw, 50))+" `runsc exec` true", ratio(pct(api, 50), pct(raw, 50)), "")
	return b.syscalls(ex)
}

// execTwoCPUs: the same round trips in a sandbox of 2 CPUs. Its p99 beside
// the 1-CPU one shows what the default quota's throttling costs: gVisor
// runs the sentry, the gofer and the child's stub on several host CPUs at
// once and spends a 1-CPU CFS quota early in a 100 ms period.
func (b *bench) execTwoCPUs(n int) error {
	rec, err := b.m.Create(b.ctx, "", sandbox.Spec{Image: "busybox", Limits: sandbox.Limits{CPUs: 2}}, nil)
	if err != nil {
		return err
	}
	defer b.m.Delete(b.ctx, "", rec.ID)
	ex, err := b.m.Client(b.ctx, "", rec.ID)
	if err != nil {
		return err
	}
	for i := 0; i < 10; i++ {
		execTrue(b.ctx, ex)
	}
	var ds []time.Duration
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := execTrue(b.ctx, ex); err != nil {
			return err
		}
		ds = append(ds, time.Since(t0))
	}
	p50, p99 := pct(ds, 50), pct(ds, 99)
	b.add("exec `true` (p99), sandbox of 2 CPUs", ms(p99), ms(p50)+" its own p50", ratio(p99, p50), "")
	return nil
}

// syscalls: 200k syscalls (`dd bs=1` of 100 kB: a read and a write a
// byte) inside the sandbox, beside the same dd on the host: what gVisor's
// platform costs per syscall.
func (b *bench) syscalls(ex *exclient.Client) error {
	argv := []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=1", "count=100000"}
	var in, host []time.Duration
	for i := 0; i < 3; i++ {
		t0 := time.Now()
		x, err := ex.Exec(b.ctx, &executorv1.ExecRequest{Argv: argv}, nil)
		if err != nil || x == nil || x.ExitCode != 0 {
			return fmt.Errorf("dd in the sandbox: %v %v", x, err)
		}
		in = append(in, time.Since(t0))
		t0 = time.Now()
		if o, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("dd on the host: %v: %s", err, o)
		}
		host = append(host, time.Since(t0))
	}
	b.add("200k syscalls: `dd bs=1 count=100000` (p50 of 3)", ms(pct(in, 50)), ms(pct(host, 50))+" the same dd on the host",
		ratio(pct(in, 50), pct(host, 50)), "")
	return nil
}

// envdDownload and envdExecP50 are E2B's envd measured in this gVisor
// (issue 8): the top of its download range, the bottom of its exec p50 range.
const (
	envdDownload = 857
	envdExecP50  = 12.8 // ms
)

// transfer: a file of mib MiB uploaded into and downloaded out of a sandbox
// through the executor, beside a plain cp into the sandbox's writable
// directory on the host.
func (b *bench) transfer(mib int) error {
	rec, err := b.m.Create(b.ctx, "", sandbox.Spec{Image: "busybox", Limits: sandbox.Limits{DiskBytes: int64(mib*3+256) << 20}}, nil)
	if err != nil {
		return err
	}
	defer b.m.Delete(b.ctx, "", rec.ID)
	src := filepath.Join(b.dir, "payload")
	if err := writeRandom(src, int64(mib)<<20); err != nil {
		return err
	}
	size := float64(mib)
	// The host's view of the sandbox's root: writes land in its upper
	// layer on its disk, where uploads land too.
	merged := rootfs.Layout{Dir: filepath.Join(b.dir, "sb", rec.ID)}.Rootfs()
	t0 := time.Now()
	if o, err := exec.Command("cp", src, filepath.Join(merged, "workspace", "cp-copy")).CombinedOutput(); err != nil {
		return fmt.Errorf("cp: %v: %s", err, o)
	}
	cpTime := time.Since(t0)

	cl, err := b.m.Client(b.ctx, "", rec.ID)
	if err != nil {
		return err
	}
	t0 = time.Now()
	if _, err := cl.CopyTo(b.ctx, src, "/workspace/up"); err != nil {
		return err
	}
	up := time.Since(t0)
	dst := filepath.Join(b.dir, "down")
	os.MkdirAll(dst, 0o755)
	t0 = time.Now()
	if _, _, err := cl.CopyFrom(b.ctx, "/workspace/up/payload", dst); err != nil {
		return err
	}
	down := time.Since(t0)
	// Both copies must be the file sent: inside (as the sandbox sees it)
	// and back on the host.
	want, err := fileSHA(src)
	if err != nil {
		return err
	}
	if got, err := fileSHA(filepath.Join(dst, "payload")); err != nil || got != want {
		return fmt.Errorf("the downloaded file differs from the one uploaded (%v)", err)
	}
	out, _, x, err := cl.Run(b.ctx, "sha256sum", "/workspace/up/payload")
	if err != nil || x.ExitCode != 0 || !strings.HasPrefix(string(out), want) {
		return fmt.Errorf("the uploaded file differs inside the sandbox: %q %v", out, err)
	}
	// The same download through reins serve's API (the service reads the
	// staged file and streams it).
	srv := apiServer(b.m)
	defer srv.Close()
	t0 = time.Now()
	apiSum, err := tarFileSHA(func(w io.Writer) error {
		_, err := client.New(srv.URL, "t").Sandbox(rec.ID).Download(b.ctx, "/workspace/up/payload", w)
		return err
	})
	if err != nil {
		return err
	}
	apiDown := time.Since(t0)
	if apiSum != want {
		return fmt.Errorf("the file downloaded through the API differs from the one uploaded")
	}
	cpRate := size / cpTime.Seconds()
	b.add(fmt.Sprintf("upload %d MiB (MiB/s)", mib), fmt.Sprintf("%.0f", size/up.Seconds()),
		fmt.Sprintf("%.0f plain `cp` on the host", cpRate), (size/up.Seconds())/cpRate, "≥ 0.5×")
	b.add(fmt.Sprintf("download %d MiB (MiB/s)", mib), fmt.Sprintf("%.0f", size/down.Seconds()),
		fmt.Sprintf("%.0f plain `cp` on the host", cpRate), (size/down.Seconds())/cpRate, "")
	b.add(fmt.Sprintf("download %d MiB through reins serve's API (MiB/s)", mib), fmt.Sprintf("%.0f", size/apiDown.Seconds()),
		fmt.Sprintf("%.0f plain `cp` on the host", cpRate), (size/apiDown.Seconds())/cpRate, "")
	// E2B's envd was measured in this gVisor before (issue 8), not in this
	// run: the ratio is to the top of its range.
	b.add(fmt.Sprintf("download %d MiB (MiB/s) against E2B envd", mib), fmt.Sprintf("%.0f", size/down.Seconds()),
		fmt.Sprintf("%d E2B envd, top of 665–857 measured in this gVisor (issue 8; not this run)", envdDownload), (size/down.Seconds())/envdDownload, "≥ 1.0×")
	return nil
}

// idleMemory: the executor's own RSS at rest, and the host memory each idle
// sandbox costs with many of them up.
func (b *bench) idleMemory(n int) error {
	before := memAvailable()
	var ids []string
	defer func() {
		for _, id := range ids {
			b.m.Delete(b.ctx, "", id)
		}
	}()
	for i := 0; i < n; i++ {
		rec, err := b.m.Create(b.ctx, "", sandbox.Spec{Image: "busybox", Limits: sandbox.Limits{MemoryBytes: 256 << 20}}, nil)
		if err != nil {
			return fmt.Errorf("sandbox %d of %d: %w", i+1, n, err)
		}
		ids = append(ids, rec.ID)
	}
	time.Sleep(3 * time.Second)
	runtime.GC()
	after := memAvailable()
	ex, err := b.m.Client(b.ctx, "", ids[0])
	if err != nil {
		return err
	}
	u, err := ex.Usage(b.ctx)
	if err != nil {
		return err
	}
	rss := float64(u.ExecutorRssBytes) / (1 << 20)
	idleGo, err := b.idleGoRSS(ex)
	if err != nil {
		return err
	}
	b.add("executor idle RSS (MiB)", fmt.Sprintf("%.1f", rss),
		fmt.Sprintf("%.1f a static Go program that only sleeps, same sandbox (E2B envd: 27, issue 8)", idleGo), rss/idleGo, "≤ 20 MiB")
	var cg uint64
	for _, id := range ids {
		cg += cgroupMemory(id)
	}
	perCg := float64(cg) / float64(n) / (1 << 20)
	perHost := float64(before-after) / float64(n) / (1 << 20)
	b.add(fmt.Sprintf("host memory per idle sandbox, %d idle (MiB)", n),
		fmt.Sprintf("%.1f (cgroup), %.1f (MemAvailable drop)", perCg, perHost),
		"256 memory limit", perHost/256, "")
	return nil
}

// idleGoRSS builds a static Go program that only sleeps, runs it in the
// sandbox of ex and returns its RSS: the floor any Go daemon pays in this
// gVisor (its runtime, its text as gVisor counts it).
func (b *bench) idleGoRSS(ex *exclient.Client) (float64, error) {
	dir := filepath.Join(b.dir, "idlego")
	os.MkdirAll(dir, 0o755)
	src := "package main\n\nimport \"time\"\n\nfunc main() { time.Sleep(time.Hour) }\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		return 0, err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module idlego\n"), 0o644); err != nil {
		return 0, err
	}
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", "idlego", ".")
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "CGO_ENABLED=0")
	if o, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("building the idle Go program: %v: %s", err, o)
	}
	if _, err := ex.CopyTo(b.ctx, filepath.Join(dir, "idlego"), "/tmp"); err != nil {
		return 0, err
	}
	out, _, x, err := ex.Run(b.ctx, "sh", "-c", "/tmp/idlego & sleep 3; grep VmRSS /proc/$!/status; kill $!")
	if err != nil || x.ExitCode != 0 {
		return 0, fmt.Errorf("running the idle Go program: %v %v %s", x, err, out)
	}
	f := strings.Fields(string(out))
	if len(f) < 2 {
		return 0, fmt.Errorf("no VmRSS for the idle Go program: %q", out)
	}
	kb, err := strconv.ParseFloat(f[1], 64)
	return kb / 1024, err
}

// noop is a trusted tool that does nothing: the loop benchmark's "true".
type noop struct{}

func (noop) Spec() tool.Spec {
	return tool.Spec{Name: "noop", Description: "does nothing", Side: tool.SideTrusted,
		InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)}
}
func (noop) Call(context.Context, string, json.RawMessage) (tool.Result, error) {
	return tool.Result{Text: "ok"}, nil
}

// loop: the agent loop's own cost per step (script model, a no-op tool:
// everything but model and tool time, durable log writes included), beside
// the floor of three durable SQLite appends (intent, result, response);
// then steps per second across many concurrent runs.
func (b *bench) loop(steps, runs, stepsPerRun int) error {
	st, blobs, err := b.stores("loop")
	if err != nil {
		return err
	}
	defer st.Close()
	scriptFor := func(n int) (string, error) {
		turn := map[string]any{"tool_calls": []any{map[string]any{"name": "noop", "input": map[string]any{}}}}
		turns := make([]any, 0, n+1)
		for i := 0; i < n; i++ {
			turns = append(turns, turn)
		}
		turns = append(turns, map[string]any{"text": "done"})
		data, _ := json.Marshal(map[string]any{"turns": turns})
		p := filepath.Join(b.dir, "loop", fmt.Sprintf("script%d.json", n))
		return "script:" + p, os.WriteFile(p, data, 0o644)
	}
	eng, err := agent.New(agent.Config{
		Store: st, Blobs: blobs, Sandboxes: manager.Runs{M: b.m}, Trusted: []tool.Tool{noop{}},
		Models: func(spec agent.ModelSpec) (model.Model, string, error) {
			p := strings.TrimPrefix(spec.Model, "script:")
			m, err := script.Load(p)
			return m, p, err
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	defer eng.Close()
	// The floor: three durable appends to a run's log.
	floorRun := "floor"
	if err := st.CreateRun(b.ctx, store.Run{ID: floorRun, Status: "running", Spec: json.RawMessage(`{}`), CreatedAt: time.Now(), UpdatedAt: time.Now()}); err != nil {
		return err
	}
	var seq int64
	t0 := time.Now()
	for i := 0; i < steps*3; i++ {
		if seq, err = st.Append(b.ctx, floorRun, seq, []store.Event{{Type: "x", Data: json.RawMessage(`{"n":1}`)}}, store.RunUpdate{}); err != nil {
			return err
		}
	}
	floor := time.Since(t0) / time.Duration(steps)

	model, err := scriptFor(steps)
	if err != nil {
		return err
	}
	t0 = time.Now()
	id, err := eng.Start(b.ctx, "", runlog.Spec{Task: "loop", Model: model, MaxSteps: steps + 5})
	if err != nil {
		return err
	}
	if err := eng.Wait(b.ctx, id); err != nil {
		return err
	}
	per := time.Since(t0) / time.Duration(steps+1)
	if row, _ := st.GetRun(b.ctx, "", id); row.Status != "succeeded" {
		return fmt.Errorf("loop run ended %s", row.Status)
	}
	b.add("agent loop overhead per step (script model, no-op tool, durable log)", ms(per),
		ms(floor)+" three durable SQLite appends", ratio(per, floor), "≤ 5 ms")

	model, err = scriptFor(stepsPerRun)
	if err != nil {
		return err
	}
	ids := make([]string, runs)
	t0 = time.Now()
	for i := range ids {
		if ids[i], err = eng.Start(b.ctx, "", runlog.Spec{Task: "loop", Model: model, MaxSteps: stepsPerRun + 5}); err != nil {
			return err
		}
	}
	for _, id := range ids {
		eng.Wait(b.ctx, id)
	}
	el := time.Since(t0)
	rate := float64(runs*(stepsPerRun+1)) / el.Seconds()
	b.add(fmt.Sprintf("steps per second, %d concurrent runs", runs), fmt.Sprintf("%.0f", rate),
		fmt.Sprintf("%.0f one run alone", 1/per.Seconds()), rate*per.Seconds(), "")
	return nil
}

// cpuThrottled is how many CFS periods the sandbox's cgroup was throttled in.
func cpuThrottled(id string) int {
	data, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpu/reins", id, "cpu.stat"))
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "nr_throttled "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

func cgroupMemory(id string) uint64 {
	data, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory/reins", id, "memory.usage_in_bytes"))
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	return v
}

func memAvailable() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "MemAvailable:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func writeRandom(p string, n int64) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.CopyN(f, rand.Reader, n)
	return err
}

// tarFileSHA runs download into a pipe and returns the sha256 of the
// first file in the tar stream it writes.
func tarFileSHA(download func(io.Writer) error) (string, error) {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(download(pw)) }()
	defer pr.Close()
	tr := tar.NewReader(pr)
	if _, err := tr.Next(); err != nil {
		return "", err
	}
	sum, err := readerSHA(tr)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(io.Discard, pr); err != nil {
		return "", err
	}
	return sum, nil
}

func fileSHA(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return readerSHA(f)
}

// readerSHA is the sha256 of what r yields.
func readerSHA(r io.Reader) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

func (b *bench) table() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "| measure | reins | baseline (same run) | ratio | goal |\n|---|---|---|---|---|\n")
	for _, r := range b.rows {
		fmt.Fprintf(&sb, "| %s | %s | %s | %.2f× | %s |\n", r.what, r.ours, r.base, r.ratio, r.goal)
	}
	return sb.String()
}

// writeDoc puts the table and the line that says how it was made between
// the markers <!-- bench:io:begin --> and <!-- bench:io:end --> of path,
// keeping everything else (the prose that reads the table) as it is. A
// file without the markers gets them appended.
func writeDoc(path, runsc, table string) error {
	const begin, end = "<!-- bench:io:begin -->", "<!-- bench:io:end -->"
	host, _ := os.Hostname()
	gen := fmt.Sprintf("%s\nMade by `make bench` (`go run ./bench -out %s`) on %s, %s, %d CPUs, %s.\n\n%s%s",
		begin, path, time.Now().UTC().Format("2006-01-02 15:04 MST"), host, runtime.NumCPU(), runsc, table, end)
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	doc := string(old)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	switch {
	case i >= 0 && j > i:
		doc = doc[:i] + gen + doc[j+len(end):]
	case len(doc) == 0:
		doc = "# Benchmarks\n\n" + gen + "\n"
	default:
		doc = strings.TrimRight(doc, "\n") + "\n\n" + gen + "\n"
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}
