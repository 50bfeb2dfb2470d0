package main

// The workload suite: what coding agents do all day (walk and search a
// source tree, fork and exec tools, write and read files, start python,
// byte-compile a tree, make syscalls), in the debian image, timed in a
// gVisor sandbox, in a runc sandbox and on the bare host in the same run.
// The goals are ratios to runc: gVisor's own cost on top of a container.
//
//	go run ./bench -workload-only [-workload-reps 3] [-workload-gvisor 'self=--overlay2=root:self;…']
//
// Every command runs as `sh -c CMD` from the host's side: through the
// executor for the sandboxes (a round trip of ~8 ms, small beside each
// command), exec'd directly on the host. Each command's output is checked
// to be the same in every place, so a broken environment cannot look fast.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/reinsdev/reins/image"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/gvisor"
	"github.com/reinsdev/reins/sandbox/manager"
	"github.com/reinsdev/reins/sandbox/runc"
)

var (
	workloadOn   = flag.Bool("workload", true, "run the workload suite (debian image; gVisor vs runc vs host)")
	workloadOnly = flag.Bool("workload-only", false, "run only the workload suite")
	workloadReps = flag.Int("workload-reps", 3, "repetitions of each workload command (the median is kept)")
	workloadVars = flag.String("workload-gvisor", "", "more gVisor configurations to time beside the default, as NAME=FLAGS;NAME=FLAGS "+
		"(runsc global flags, space-separated, added after gvisor.GlobalFlags), e.g. 'self=--overlay2=root:self'")
	workloadMatch  = flag.String("workload-match", "", "run only the workloads whose name contains this")
	workloadAdd    = flag.String("workload-add", "", "one more command to time everywhere (sh -c, $T is the trees' directory), for digging into a figure")
	workloadWhy    = flag.Bool("workload-why", true, "count each command's syscalls and page faults on the host (strace, perf) and divide gVisor's extra time by them")
	workloadCPUs   = flag.Float64("workload-cpus", 2, "CPUs of each sandbox of the workload suite")
	workloadImages = flag.String("images", "/var/cache/reins/images", "image store kept across runs (the debian image is built once, about a minute)")
)

// workTable is the workload suite's table, kept apart from the main one:
// it has a column per place the commands ran.
var workTable string

// workload is one command of the suite and its goal against runc.
type workload struct {
	name string
	cmd  string  // run by sh -c in T (the tree's parent): $T is set
	goal float64 // gVisor ÷ runc at most; 0: none
	prep string  // run before each repetition, untimed
	drop bool    // drop the host's page cache before each repetition
	show bool    // print the output instead of checking it is the same everywhere
}

// workloads: T holds src (a copy of Go's source tree, 12-13k files,
// ~160 MiB) and py (the image's python3.11 standard library).
func workloads() []workload {
	return []workload{
		{name: "`find` over Go's src (names matching *_test.go)", cmd: `find $T/src -name '*_test.go' | wc -l`, goal: 3},
		{name: "`grep -r` over Go's src", cmd: `grep -r syscall.Errno $T/src | wc -l`, goal: 3},
		{name: "500 fork+exec of /bin/true from sh", cmd: `i=0; while [ $i -lt 500 ]; do /bin/true; i=$((i+1)); done; echo $i`, goal: 6},
		{name: "`dd bs=4k` write 200 MiB (a new file)", prep: `rm -f $T/dd.bin`, cmd: `dd if=/dev/zero of=$T/dd.bin bs=4k count=51200 status=none; echo ok`, goal: 3},
		{name: "`dd bs=4k` read it back (host page cache dropped)", drop: true, cmd: `dd if=$T/dd.bin of=/dev/null bs=4k status=none; echo ok`, goal: 3},
		{name: "`python3 -c pass` ×20", cmd: `for i in $(seq 20); do python3 -c pass; done; echo ok`, goal: 2},
		{name: "`python3 -m compileall -f` of the stdlib (~650 modules)", cmd: `python3 -m compileall -q -f $T/py >/dev/null; echo ok`, goal: 2},
		{name: "200k syscalls: `dd if=/dev/zero of=/dev/null bs=1 count=100000`", cmd: `dd if=/dev/zero of=/dev/null bs=1 count=100000 status=none; echo ok`, goal: 4},
	}
}

// place is somewhere the commands run.
type place struct {
	name string
	t    string                                                // the directory the trees are in
	run  func(ctx context.Context, cmd string) (string, error) // stdout
}

func (b *bench) workload() error {
	ctx := b.ctx
	exe, err := filepath.Abs(flag.Lookup("executor").Value.String())
	if err != nil {
		return err
	}
	images, err := image.NewStore(*workloadImages)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "  resolving the debian image (built once into", *workloadImages+")")
	img, err := images.Resolve(ctx, "debian", nil)
	if err != nil {
		return err
	}
	dir := filepath.Join(b.dir, "work")
	backends := map[string]sandbox.Backend{}
	gvNames := []string{"gvisor"}
	if backends["gvisor"], err = gvisor.New(filepath.Join(dir, "rt-gvisor")); err != nil {
		return err
	}
	variants, err := parseVariants(*workloadVars)
	if err != nil {
		return err
	}
	for _, v := range variants {
		name := "gvisor " + v.name
		if backends[name], err = gvisor.New(filepath.Join(dir, "rt-"+v.name), gvisor.WithFlags(v.flags...)); err != nil {
			return err
		}
		gvNames = append(gvNames, name)
	}
	if backends["runc"], err = runc.New(filepath.Join(dir, "rt-runc")); err != nil {
		return err
	}
	m, err := manager.New(manager.Config{
		Dir: filepath.Join(dir, "sb"), ExecutorPath: exe, Backends: backends, DefaultBackend: "gvisor",
		Images: manager.ImageStore(images), CheckInterval: time.Hour, DiskPool: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	goroot, err := exec.CommandContext(ctx, "go", "env", "GOROOT").Output()
	if err != nil {
		return fmt.Errorf("go env GOROOT (the suite walks Go's source tree): %w", err)
	}
	goSrc := filepath.Join(strings.TrimSpace(string(goroot)), "src")
	pyLib := filepath.Join(img.Layers[0], "usr/lib/python3.11")
	var places []place
	for _, name := range append(gvNames, "runc") {
		p, cleanup, err := sandboxPlace(ctx, m, name, goSrc)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		defer cleanup()
		places = append(places, p)
	}
	host, err := hostPlace(ctx, filepath.Join(dir, "host"), goSrc, pyLib)
	if err != nil {
		return err
	}
	places = append(places, host)

	var ws []workload
	all := workloads()
	if *workloadAdd != "" {
		all = append(all, workload{name: "`" + *workloadAdd + "`", cmd: *workloadAdd, show: true})
	}
	for _, w := range all {
		if strings.Contains(w.name, *workloadMatch) {
			ws = append(ws, w)
		}
	}
	times := make([][]time.Duration, len(ws)) // [workload][place]
	for i, w := range ws {
		runs := make([][]time.Duration, len(places))
		want := ""
		for r := 0; r < *workloadReps; r++ {
			for j, p := range places { // interleaved, so drift hits all alike
				d, out, err := timeOne(ctx, p, w)
				if err != nil {
					return fmt.Errorf("%s in %s: %w", w.name, p.name, err)
				}
				if w.show {
					fmt.Fprintf(os.Stderr, "  %s: %s\n", p.name, out)
				} else if want == "" {
					want = out
				} else if out != want {
					return fmt.Errorf("%s: %s printed %q, %s %q", w.name, p.name, out, places[0].name, want)
				}
				runs[j] = append(runs[j], d)
			}
		}
		for j := range places {
			times[i] = append(times[i], pct(runs[j], 50))
		}
		fmt.Fprintf(os.Stderr, "  %s:", w.name)
		for j, p := range places {
			fmt.Fprintf(os.Stderr, " %s %s", p.name, ms(times[i][j]))
		}
		fmt.Fprintln(os.Stderr)
	}
	workTable = workTableOf(ws, places, len(gvNames), times)
	if *workloadWhy {
		why, err := whyTable(ctx, ws, host, len(gvNames), times)
		if err != nil {
			return err
		}
		workTable += "\n" + why
	}
	return nil
}

// whyTable counts, on the host, the syscalls (strace -f -c) and page
// faults (perf stat) each command makes — the same binaries and files as
// in the sandboxes — and divides gVisor's extra time over runc by them:
// what each event costs in gVisor if they are where the time goes. Beside
// the 200k-syscall loop's figure, it says which commands are bound by the
// platform's per-syscall (and per-fault) cost rather than by file access.
func whyTable(ctx context.Context, ws []workload, host place, gvisors int, times [][]time.Duration) (string, error) {
	var sb strings.Builder
	sb.WriteString("| workload | syscalls (host strace) | page faults (host perf) | gvisor − runc per syscall+fault |\n|---|---|---|---|\n")
	for i, w := range ws {
		if w.prep != "" {
			if _, err := host.run(ctx, w.prep); err != nil {
				return "", err
			}
		}
		calls, faults, err := countEvents(ctx, host.t, w.cmd)
		if err != nil {
			return "", fmt.Errorf("counting %s: %w", w.name, err)
		}
		extra := times[i][0] - times[i][gvisors]
		fmt.Fprintf(&sb, "| %s | %d | %d | %.1f µs |\n", w.name, calls, faults, float64(extra)/1e3/float64(calls+faults))
	}
	return sb.String(), nil
}

func countEvents(ctx context.Context, t, cmd string) (calls, faults int64, err error) {
	out := filepath.Join(t, "strace.out")
	defer os.Remove(out)
	env := []string{"PATH=/usr/bin:/bin", "T=" + t, "LC_ALL=C"}
	c := exec.CommandContext(ctx, "strace", "-f", "-c", "-o", out, "/bin/sh", "-c", cmd)
	c.Env = env
	if o, err := c.CombinedOutput(); err != nil {
		return 0, 0, fmt.Errorf("strace (apt-get install strace): %v: %s", err, o)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.Lines(string(data)) {
		if f := strings.Fields(line); len(f) >= 5 && f[len(f)-1] == "total" {
			fmt.Sscan(f[3], &calls)
		}
	}
	c = exec.CommandContext(ctx, "perf", "stat", "-x,", "-e", "page-faults", "--", "/bin/sh", "-c", cmd)
	c.Env = env
	var stderr strings.Builder
	c.Stderr = &stderr
	if err := c.Run(); err != nil {
		return 0, 0, fmt.Errorf("perf stat (apt-get install linux-perf): %v: %s", err, stderr.String())
	}
	for line := range strings.Lines(stderr.String()) {
		if f := strings.Split(line, ","); len(f) > 2 && f[2] == "page-faults" {
			fmt.Sscan(f[0], &faults)
		}
	}
	if calls == 0 {
		return 0, 0, fmt.Errorf("strace counted no syscalls")
	}
	return calls, faults, nil
}

type variant struct {
	name  string
	flags []string
}

func parseVariants(s string) ([]variant, error) {
	var out []variant
	for part := range strings.SplitSeq(s, ";") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		name, flags, ok := strings.Cut(part, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.ContainsAny(name, "/ ") {
			return nil, fmt.Errorf("-workload-gvisor: %q is not NAME=FLAGS", part)
		}
		out = append(out, variant{name, strings.Fields(flags)})
	}
	return out, nil
}

// sandboxPlace makes a debian sandbox on backend with a copy of Go's
// source tree uploaded through the executor (written by the sandbox, as a
// clone or an unpack would be) and the image's python library copied.
func sandboxPlace(ctx context.Context, m *manager.Manager, backend, goSrc string) (place, func(), error) {
	rec, err := m.Create(ctx, "", sandbox.Spec{Image: "debian", Backend: backend,
		Limits: sandbox.Limits{CPUs: *workloadCPUs, MemoryBytes: 4 << 30, DiskBytes: 4 << 30}}, nil)
	if err != nil {
		return place{}, nil, err
	}
	cleanup := func() { m.Delete(context.Background(), "", rec.ID) }
	ex, err := m.Client(ctx, "", rec.ID)
	if err != nil {
		cleanup()
		return place{}, nil, err
	}
	const t = "/workspace/t"
	p := place{name: backend, t: t, run: func(ctx context.Context, cmd string) (string, error) {
		stdout, stderr, x, err := ex.Run(ctx, "sh", "-c", "T="+t+"; "+cmd)
		if err != nil {
			return "", err
		}
		if x.GetExitCode() != 0 || len(stderr) > 0 {
			return "", fmt.Errorf("exit %d: %s", x.GetExitCode(), stderr)
		}
		return string(stdout), nil
	}}
	t0 := time.Now()
	if _, err := p.run(ctx, "mkdir -p $T && cp -a /usr/lib/python3.11 $T/py"); err != nil {
		cleanup()
		return place{}, nil, err
	}
	if _, err := ex.CopyTo(ctx, goSrc, t); err != nil {
		cleanup()
		return place{}, nil, fmt.Errorf("uploading Go's src: %w", err)
	}
	fmt.Fprintf(os.Stderr, "  %s: sandbox %s ready in %v\n", backend, rec.ID, time.Since(t0).Round(time.Millisecond))
	return p, cleanup, nil
}

// hostPlace copies the same trees into a host directory and runs the
// commands with Debian's tools (PATH has no shims: pyenv's would add a
// shell script per python3).
func hostPlace(ctx context.Context, t, goSrc, pyLib string) (place, error) {
	if err := os.MkdirAll(t, 0o755); err != nil {
		return place{}, err
	}
	for _, c := range [][]string{{"cp", "-a", goSrc, t + "/src"}, {"cp", "-a", pyLib, t + "/py"}} {
		if o, err := exec.CommandContext(ctx, c[0], c[1:]...).CombinedOutput(); err != nil {
			return place{}, fmt.Errorf("%v: %v: %s", c, err, o)
		}
	}
	return place{name: "host", t: t, run: func(ctx context.Context, cmd string) (string, error) {
		c := exec.CommandContext(ctx, "/bin/sh", "-c", cmd)
		c.Env = []string{"PATH=/usr/bin:/bin", "T=" + t, "LC_ALL=C"}
		var stderr strings.Builder
		c.Stderr = &stderr
		out, err := c.Output()
		if err != nil || stderr.Len() > 0 {
			return "", fmt.Errorf("%v: %s", err, stderr.String())
		}
		return string(out), nil
	}}, nil
}

func timeOne(ctx context.Context, p place, w workload) (time.Duration, string, error) {
	if w.prep != "" {
		if _, err := p.run(ctx, w.prep); err != nil {
			return 0, "", err
		}
	}
	if w.drop {
		if err := dropCaches(); err != nil {
			return 0, "", err
		}
	}
	t0 := time.Now()
	out, err := p.run(ctx, w.cmd)
	return time.Since(t0), strings.TrimSpace(out), err
}

// dropCaches writes the host's dirty pages and drops its clean page cache,
// so a read goes to the disk (the sandboxes' ext4 images sit on it too).
func dropCaches() error {
	if o, err := exec.Command("sync").CombinedOutput(); err != nil {
		return fmt.Errorf("sync: %v: %s", err, o)
	}
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0o200)
}

// workTableOf: one row per workload; a column per gVisor configuration
// (time and ratio to runc), then runc and the host, then the default
// gVisor's ratio to runc beside its goal.
func workTableOf(ws []workload, places []place, gvisors int, times [][]time.Duration) string {
	runcAt, hostAt := gvisors, gvisors+1
	var sb strings.Builder
	sb.WriteString("| workload (median of " + fmt.Sprint(*workloadReps) + ") |")
	for _, p := range places[:gvisors] {
		fmt.Fprintf(&sb, " %s (÷ runc, ÷ host) |", p.name)
	}
	sb.WriteString(" runc (÷ host) | host | goal: gvisor ÷ runc |\n|---|")
	sb.WriteString(strings.Repeat("---|", gvisors+3) + "\n")
	for i, w := range ws {
		t := times[i]
		fmt.Fprintf(&sb, "| %s |", w.name)
		for j := 0; j < gvisors; j++ {
			fmt.Fprintf(&sb, " %s (%.2f×, %.1f×) |", ms(t[j]), ratio(t[j], t[runcAt]), ratio(t[j], t[hostAt]))
		}
		fmt.Fprintf(&sb, " %s (%.2f×) | %s |", ms(t[runcAt]), ratio(t[runcAt], t[hostAt]), ms(t[hostAt]))
		r := ratio(t[0], t[runcAt])
		if w.goal == 0 {
			sb.WriteString(" |\n")
			continue
		}
		verdict := "met"
		if r > w.goal {
			verdict = "**not met**"
		}
		fmt.Fprintf(&sb, " ≤ %.0f×: %.2f×, %s |\n", w.goal, r, verdict)
	}
	return sb.String()
}

// Markers around the workload table in docs/benchmarks.md.
const (
	workBegin = "<!-- bench:work:begin -->"
	workEnd   = "<!-- bench:work:end -->"
)

// writeWorkDoc puts the workload table between its markers in path (after
// the rest of the file when they are missing), leaving the rest alone.
func writeWorkDoc(path, runsc string) error {
	if workTable == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	doc := string(data)
	block := fmt.Sprintf("%s\n## Workload suite\n\n`go run ./bench -workload-only`, %s, %s, %d CPUs, %s; each sandbox %g CPUs, 4 GiB, debian image.\n\n%s%s",
		workBegin, time.Now().UTC().Format("2006-01-02"), hostname(), runtime.NumCPU(), runsc, *workloadCPUs, workTable, workEnd)
	before, rest, found := strings.Cut(doc, workBegin)
	if _, after, ok := strings.Cut(rest, workEnd); found && ok {
		doc = before + block + after
	} else {
		doc = strings.TrimRight(doc, "\n") + "\n\n" + block + "\n"
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}
