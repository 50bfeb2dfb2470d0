package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/server"
)

// The CLI's docker and kubectl habits (docs/cli.md), checked through the
// whole command tree (newRoot) against the real API over fakes.

// reins runs the CLI's root with args; stdout and stderr together.
func reins(t *testing.T, args ...string) (string, error) {
	t.Helper()
	c := newRoot()
	var out bytes.Buffer
	c.SetOut(&out)
	c.SetErr(&out)
	c.SetArgs(args)
	err := c.Execute()
	return out.String(), err
}

// TestFlagUnits: sizes in docker's and kubectl's units, CPUs as
// millicores, and the refusals in words.
func TestFlagUnits(t *testing.T) {
	for in, want := range map[string]int64{"128Mi": 128 << 20, "1Gi": 1 << 30, "512M": 512 << 20, "2G": 2 << 30, "2GB": 2e9, "1.5GiB": 3 << 29, "64ki": 64 << 10} {
		var f sizeFlag
		if err := f.Set(in); err != nil || f.v != want {
			t.Errorf("size %q = %d, %v; want %d", in, f.v, err, want)
		}
	}
	for in, want := range map[string]float64{"500m": 0.5, "0.5": 0.5, "2": 2, "1500m": 1.5} {
		var f cpuFlag
		if err := f.Set(in); err != nil || f.v != want {
			t.Errorf("cpus %q = %g, %v; want %g", in, f.v, err, want)
		}
	}
	t.Setenv("REINS_URL", "http://127.0.0.1:1") // nothing is dialled
	t.Setenv("REINS_TOKEN", "tok")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sandbox", "create", "--memory", "0"}, "--memory 0: give a size such as 512Mi, or leave it out for the default"},
		{[]string{"sandbox", "create", "--disk", "0"}, "--disk 0: give a size such as 512Mi"},
		{[]string{"sandbox", "create", "--memory", "lots"}, "--memory lots: not a size: write a number and a unit, like 512Mi"},
		{[]string{"sandbox", "create", "--cpus", "0"}, "--cpus 0: give a number of CPUs such as 0.5, 2 or 500m"},
		{[]string{"sandbox", "create", "--cpus", "half"}, "--cpus half: not a number of CPUs"},
		{[]string{"sandbox", "create", "--ttl", "30"}, "--ttl 30: did you mean 30s?"},
		{[]string{"sandbox", "exec", "--timeout", "5", "abc", "true"}, "--timeout 5: did you mean 5s?"},
		{[]string{"run", "--timeout", "1.5", "task"}, "--timeout 1.5: did you mean 1.5s?"},
		{[]string{"run", "--memory", "0", "task"}, "--memory 0: give a size"},
	} {
		_, err := reins(t, tc.args...)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want a usage error saying %q", tc.args, err, tc.want)
		}
	}
}

// TestEveryDurationFlagWantsAUnit: every duration flag of every command
// refuses a bare number, suggesting seconds (a pflag DurationVar would
// say only "missing unit"); 0 and a duration with a unit are taken.
func TestEveryDurationFlagWantsAUnit(t *testing.T) {
	n := 0
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Value.Type() != "duration" {
				return
			}
			n++
			name := c.CommandPath() + " --" + f.Name
			if err := f.Value.Set("30"); err == nil || !strings.Contains(err.Error(), "did you mean 30s?") {
				t.Errorf("%s 30: %v, want \"did you mean 30s?\"", name, err)
			}
			if err := f.Value.Set("90s"); err != nil || f.Value.String() != "1m30s" {
				t.Errorf("%s 90s: %v, %s", name, err, f.Value)
			}
			if err := f.Value.Set("0"); err != nil {
				t.Errorf("%s 0: %v", name, err)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot())
	if n < 10 {
		t.Errorf("found %d duration flags; the walk missed the tree", n)
	}
}

// TestReinsURLWithoutScheme: a bare HOST:PORT is http.
func TestReinsURLWithoutScheme(t *testing.T) {
	for in, want := range map[string]string{"127.0.0.1:7070": "http://127.0.0.1:7070", "localhost:7070/": "http://localhost:7070",
		"https://reins.example.com": "https://reins.example.com", "http://h:1": "http://h:1"} {
		t.Setenv("REINS_URL", in)
		t.Setenv("REINS_TOKEN", "tok")
		cl, err := client.FromEnv()
		if err != nil || cl.URL != want {
			t.Errorf("REINS_URL=%s: %v, %v; want %s", in, cl.URL, err, want)
		}
	}
	// And it reaches the service.
	serveBoxes(t, "aaaa11112222")
	srvURL := os.Getenv("REINS_URL")
	t.Setenv("REINS_URL", strings.TrimPrefix(srvURL, "http://"))
	if out, err := reins(t, "sandbox", "ls", "-q"); err != nil || out != "aaaa11112222\n" {
		t.Errorf("ls through a scheme-less REINS_URL: %q, %v", out, err)
	}
}

// boxes is a tenant's sandboxes for the API over fakes: Get, List and
// Delete, nothing else.
type boxes struct {
	server.Sandboxes
	infos   []sandbox.Info
	deleted []string
}

func (b *boxes) find(id string) int {
	return slices.IndexFunc(b.infos, func(i sandbox.Info) bool { return i.ID == id })
}

func (b *boxes) Get(_ context.Context, _, id string) (sandbox.Info, error) {
	if i := b.find(id); i >= 0 {
		return b.infos[i], nil
	}
	return sandbox.Info{}, errdefs.ErrNotFound
}

func (b *boxes) List(_ context.Context, _ string, labels map[string]string) []sandbox.Info {
	var out []sandbox.Info
	for _, in := range b.infos {
		match := true
		for k, v := range labels {
			match = match && in.Spec.Labels[k] == v
		}
		if match {
			out = append(out, in)
		}
	}
	return out
}

func (b *boxes) Delete(_ context.Context, _, id string) error {
	i := b.find(id)
	if i < 0 {
		return errdefs.ErrNotFound
	}
	b.infos = slices.Delete(b.infos, i, i+1)
	b.deleted = append(b.deleted, id)
	return nil
}

// serveBoxes serves the API over sandboxes with these ids (running,
// unless the id says "dead": stopped), the CLI pointed at it.
func serveBoxes(t *testing.T, ids ...string) *boxes {
	b := &boxes{}
	for i, id := range ids {
		st := sandbox.StateRunning
		if strings.Contains(id, "dead") {
			st = sandbox.StateStopped
		}
		labels := map[string]string{"n": string(rune('a' + i)), "team": "x"}
		if i%2 == 1 {
			labels["team"] = "y"
		}
		b.infos = append(b.infos, sandbox.Info{ID: id, State: st, CreatedAt: time.Unix(int64(i), 0), Spec: sandbox.Spec{Image: "busybox", Labels: labels}})
	}
	serveAPI(t, server.New(b, "tok", nil).Handler())
	return b
}

// TestIDPrefixes: a prefix names the one sandbox it begins; the exact id
// wins over a longer one it begins; several are listed; none is the
// service's "not found".
func TestIDPrefixes(t *testing.T) {
	serveBoxes(t, "3f2a9c1b7d4e", "3f2a00000000", "3f2a0000000099", "77aa00000000")
	for arg, want := range map[string]string{"77": "77aa00000000", "3f2a9": "3f2a9c1b7d4e", "3f2a00000000": "3f2a00000000"} {
		out, err := reins(t, "sandbox", "show", arg)
		if f := strings.Fields(out); err != nil || len(f) < 2 || f[0] != "id" || f[1] != want {
			t.Errorf("show %s: %v\n%s", arg, err, out)
		}
	}
	_, err := reins(t, "sandbox", "show", "3f2a")
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), `"3f2a" is the start of 3 sandbox ids: 3f2a00000000, 3f2a0000000099, 3f2a9c1b7d4e; give more of the id`) {
		t.Errorf("an ambiguous prefix: %v", err)
	}
	if _, err := reins(t, "sandbox", "show", "99"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a prefix of nothing: %v, want not found", err)
	}
	// rm takes prefixes for every argument.
	out, err := reins(t, "sandbox", "rm", "77", "3f2a9")
	if err != nil || out != "77aa00000000\n3f2a9c1b7d4e\nremoved 2 sandboxes\n" {
		t.Errorf("rm 77 3f2a9: %q, %v", out, err)
	}
}

// TestPickID: a run's prefix may leave out "run_".
func TestPickID(t *testing.T) {
	ids := []string{"run_0011223344556677", "run_00aa223344556677", "run_ff11223344556677"}
	for arg, want := range map[string]string{"ff": "run_ff11223344556677", "run_ff": "run_ff11223344556677", "0011": "run_0011223344556677"} {
		if got, err := pickID(runID, ids, arg); err != nil || got != want {
			t.Errorf("%s: %s, %v; want %s", arg, got, err, want)
		}
	}
	if _, err := pickID(runID, ids, "00"); err == nil || !strings.Contains(err.Error(), "2 run ids") {
		t.Errorf("00: %v", err)
	}
	if !sandboxID.full("3f2a9c1b7d4e") || sandboxID.full("3f2a") || !runID.full("run_0011223344556677") || runID.full("0011223344556677") {
		t.Error("full ids are told from prefixes wrongly")
	}
}

// TestListAndRemoveInBulk: ls hides stopped sandboxes unless --all; -q
// prints ids only; rm --label and --all remove what they match and count.
func TestListAndRemoveInBulk(t *testing.T) {
	b := serveBoxes(t, "aaaa00000001", "aaaadead0002", "aaaa00000003", "aaaa00000004")
	if out, err := reins(t, "sandbox", "ls", "-q"); err != nil || out != "aaaa00000001\naaaa00000003\naaaa00000004\n" {
		t.Errorf("ls -q: %q, %v", out, err)
	}
	if out, err := reins(t, "sandbox", "ls", "-q", "--all"); err != nil || !strings.Contains(out, "aaaadead0002") {
		t.Errorf("ls -q --all: %q, %v", out, err)
	}
	if out, err := reins(t, "sandbox", "ls"); err != nil || strings.Contains(out, "dead") || !strings.HasPrefix(out, "ID ") {
		t.Errorf("ls: %q, %v", out, err)
	}
	out, err := reins(t, "sandbox", "rm", "--label", "team=y", "-l", "n=b")
	if err != nil || out != "aaaadead0002\nremoved 1 sandbox\n" {
		t.Errorf("rm --label team=y --label n=b: %q, %v", out, err)
	}
	out, err = reins(t, "sandbox", "rm", "--all")
	if err != nil || out != "aaaa00000001\naaaa00000003\naaaa00000004\nremoved 3 sandboxes\n" || len(b.infos) != 0 {
		t.Errorf("rm --all: %q, %v; left %v", out, err, b.infos)
	}
	if out, err := reins(t, "sandbox", "rm", "--all"); err != nil || out != "removed 0 sandboxes\n" {
		t.Errorf("rm --all of none: %q, %v", out, err)
	}
	for _, args := range [][]string{{"sandbox", "rm"}, {"sandbox", "rm", "--all", "aaaa00000001"}} {
		var ue usageError
		if _, err := reins(t, args...); !errors.As(err, &ue) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

// TestPickProcess: logs and kill take a tag where they take a PID.
func TestPickProcess(t *testing.T) {
	procs := []*executorv1.ProcessInfo{
		{Pid: 7, Tag: "web", Running: false}, {Pid: 9, Tag: "web", Running: true},
		{Pid: 11, Tag: "job", Running: false}, {Pid: 12, Tag: "job", Running: false}, {Pid: 13, Tag: "db", Running: true},
	}
	for tag, want := range map[string]int32{"web": 9, "db": 13} {
		if pid, err := pickProcess(procs, tag); err != nil || pid != want {
			t.Errorf("%s: %d, %v; want %d", tag, pid, err, want)
		}
	}
	if _, err := pickProcess(procs, "job"); err == nil || !strings.Contains(err.Error(), "PIDs 11, 12") {
		t.Errorf("a tag two exited processes share: %v", err)
	}
	if _, err := pickProcess(procs, "nope"); err == nil || !strings.Contains(err.Error(), "neither a PID nor the tag") {
		t.Errorf("an unknown tag: %v", err)
	}
}

// TestShowEnvMasksSecrets: credentials' values never reach the screen;
// a reins secret is named as the placeholder it is.
func TestShowEnvMasksSecrets(t *testing.T) {
	for name, secret := range map[string]bool{"API_KEY": true, "GITHUB_TOKEN": true, "DB_PASSWORD": true, "aws_secret_access_key": true,
		"OPENAI_APIKEY": true, "PGPASS": false, "DB_PASS": true, "PATH": false, "KEYBOARD": false, "HOME": false, "GREETING": false, "PWD": false} {
		if got := secretName(name); got != secret {
			t.Errorf("secretName(%s) = %v", name, got)
		}
	}
	var out bytes.Buffer
	printSandboxEnv(&out, &reinsv1.Sandbox{Spec: &reinsv1.SandboxSpec{Env: []string{"GREETING=hi", "API_KEY=sk-live-123", "EMPTY_TOKEN="},
		Network: &reinsv1.Network{Secrets: []*reinsv1.SecretBinding{{Name: "GH", Hosts: []string{"api.github.com"}}}}}})
	got := out.String()
	if strings.Contains(got, "sk-live") || !strings.Contains(got, "env\tGREETING=hi\n\tAPI_KEY=•••• (masked)\n\tEMPTY_TOKEN=\n") ||
		!strings.Contains(got, "GH=•••• (reins secret: a placeholder here, the value sent only to api.github.com)") {
		t.Errorf("env:\n%s", got)
	}
	now := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	sb := &reinsv1.Sandbox{ExpiresUnixNano: now.Add(29*time.Minute + 50*time.Second).UnixNano(), Spec: &reinsv1.SandboxSpec{TtlMs: 1800000}}
	if got, want := expiryWords(sb, now), "in 29m50s (at 2026-12-02T04:29:50Z; ttl 30m0s)"; got != want {
		t.Errorf("expiry %q, want %q", got, want)
	}
	u := &executorv1.UsageResponse{MemoryBytes: 12 << 20, DiskUsedBytes: 3 << 20, DiskTotalBytes: 4 << 30, Processes: 2, CpuSeconds: 0.42}
	if got, want := usageWords(u, false), "memory 12 MiB, disk 3 MiB of 4 GiB, 2 processes, CPU 0.4s"; got != want {
		t.Errorf("usage %q, want %q", got, want)
	}
	// With the host's "memory used" line printed, memory is not given twice.
	if got, want := usageWords(u, true), "disk 3 MiB of 4 GiB, 2 processes, CPU 0.4s"; got != want {
		t.Errorf("usage beside the host's memory %q, want %q", got, want)
	}
}

// TestOfflineCost: a script: run claims no cost; a priced one does.
func TestOfflineCost(t *testing.T) {
	script := &reinsv1.Run{Spec: &reinsv1.RunSpec{Model: "script:/x.json"}}
	paid := &reinsv1.Run{Spec: &reinsv1.RunSpec{Model: "anthropic:claude-sonnet-4-5"}, CostUsd: 0.0213}
	if costWords(script) != "none (offline model)" || costCell(script) != "-" || costWords(paid) != "$0.0213" {
		t.Errorf("%q %q %q", costWords(script), costCell(script), costWords(paid))
	}
	var out bytes.Buffer
	v := newRunView(&out, false)
	v.tty = false
	v.footer(&reinsv1.Run{Id: "run_x", Status: reinsv1.RunStatus_RUN_STATUS_SUCCEEDED, Spec: script.Spec, Steps: 3, Usage: &reinsv1.Usage{InputTokens: 10}})
	if strings.Contains(out.String(), "$") || !strings.Contains(out.String(), "succeeded · 3 steps · 10 tokens · ") {
		t.Errorf("footer of an offline run:\n%s", out.String())
	}
}
