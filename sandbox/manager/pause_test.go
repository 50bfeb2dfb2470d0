package manager

import (
	"bufio"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor"
	"github.com/reinsdev/reins/executor/client"
	"github.com/reinsdev/reins/internal/testenv"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/gvisor"
	"github.com/reinsdev/reins/sandbox/runc"
)

// The executor listens again on the signal the backends send.
func TestRelistenSignalsAgree(t *testing.T) {
	if executor.ListenAgainSignal != sandbox.RelistenSignal {
		t.Fatalf("executor.ListenAgainSignal %v, sandbox.RelistenSignal %v", executor.ListenAgainSignal, sandbox.RelistenSignal)
	}
}

// pauseCounter counts in memory, appends each count to a file on the
// disk through a descriptor it holds, and a listener answers on port 8080
// with the current count.
const pauseCounter = `exec 3>>/workspace/count.log
i=0
(while :; do i=$((i+1)); echo $i > /tmp/n; echo $i >&3; sleep 0.05; done) &
exec nc -ll -p 8080 -e /bin/cat /tmp/n`

func gvisorManager(t *testing.T, dir string) *Manager {
	t.Helper()
	testenv.RequiresRoot(t)
	runsc := testenv.RequiresRunsc(t, gvisor.DefaultRunsc())
	exe := filepath.Join(dir, "reins-executor")
	if _, err := os.Stat(exe); err != nil {
		exe = buildExecutor(t, dir)
	}
	gv, err := gvisor.New(filepath.Join(dir, "runsc"), gvisor.WithBinary(runsc))
	if err != nil {
		t.Fatal(err)
	}
	return realManager(t, dir, exe, "gvisor", gv)
}

// counts checks that count.log holds 1, 2, 3, … (no restart, no lost
// offset) and returns how many.
func countsIn(t *testing.T, ctx context.Context, c *client.Client) int {
	t.Helper()
	data, err := c.ReadFile(ctx, "/workspace/count.log")
	if errors.Is(err, errdefs.ErrNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(data))
	for i, l := range lines {
		if l != strconv.Itoa(i+1) {
			t.Fatalf("count.log line %d is %q: the counter restarted or lost its place", i+1, l)
		}
	}
	return len(lines)
}

func askPort(t *testing.T, ctx context.Context, c *client.Client) int {
	t.Helper()
	conn, err := c.DialPort(ctx, 8080)
	if err != nil {
		t.Fatalf("DialPort 8080: %v", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	n, aerr := strconv.Atoi(strings.TrimSpace(line))
	if aerr != nil {
		t.Fatalf("the listener answered %q, %v", line, err)
	}
	return n
}

// counterBox is a busybox gVisor sandbox of m running pauseCounter,
// which has counted a few times.
func counterBox(t *testing.T, ctx context.Context, m *Manager) (sandbox.Info, *client.Client) {
	t.Helper()
	id, c, _ := pausedBox(t, m, sandbox.Limits{})
	if _, err := c.Start(ctx, &executorv1.ExecRequest{Argv: []string{"sh", "-c", pauseCounter}, Background: true}); err != nil {
		t.Fatal(err)
	}
	waitCount(t, ctx, c, 3)
	info, err := m.Get(ctx, "", id)
	if err != nil {
		t.Fatal(err)
	}
	return info, c
}

func waitCount(t *testing.T, ctx context.Context, c *client.Client, over int) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if n := countsIn(t, ctx, c); n > over {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("the count stayed at or under %d", over)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Pause keeps memory, open files and a listener; the paused sandbox holds
// no runtime state, mount or network; its record survives a restart of
// the service, and it resumes after it.
func TestPauseResume(t *testing.T) {
	dir := t.TempDir()
	m := gvisorManager(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	info, _ := counterBox(t, ctx, m)

	paused, instead, n, err := m.Pause(ctx, "", info.ID, false)
	if err != nil || instead {
		t.Fatalf("Pause: %v (suspended instead: %v)", err, instead)
	}
	if paused.State != sandbox.StatePaused || n <= 0 {
		t.Fatalf("after Pause: state %s, image %d bytes", paused.State, n)
	}
	b, _ := m.lookup("", info.ID)
	if _, err := m.cfg.Backends["gvisor"].Status(ctx, info.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the runtime still knows the paused sandbox (%v)", err)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), b.dir) {
		t.Errorf("something of the paused sandbox is still mounted:\n%s", grepLines(string(mounts), b.dir))
	}
	if fi, err := os.Stat(checkpointDir(b.dir)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("checkpoint dir: %v, %v; want it 0700", fi, err)
	}
	if _, _, _, err := m.Pause(ctx, "", info.ID, false); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "already paused") {
		t.Errorf("pausing a paused sandbox: %v", err)
	}

	// A restart of the service finds it paused and resumes it.
	m.Close()
	m2 := gvisorManager(t, dir)
	if err := m2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := m2.Get(ctx, "", info.ID); err != nil || got.State != sandbox.StatePaused {
		t.Fatalf("after a restart: %v, %v; want paused", got.State, err)
	}
	t.Cleanup(func() { m2.Delete(context.Background(), "", info.ID) })
	resumed, err := m2.Resume(ctx, "", info.ID)
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if resumed.State != sandbox.StateRunning {
		t.Fatalf("after Resume: %s", resumed.State)
	}
	c2, err := m2.Client(ctx, "", info.ID)
	if err != nil {
		t.Fatal(err)
	}
	saved := countsIn(t, ctx, c2)
	waitCount(t, ctx, c2, saved+3)
	if v := askPort(t, ctx, c2); v <= saved {
		t.Errorf("the listener answered %d, want more than %d", v, saved)
	}
	if _, err := os.Stat(checkpointDir(b.dir)); !os.IsNotExist(err) {
		t.Errorf("the memory image is still there after the resume (%v)", err)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// On runc pause is refused with what to do, or suspends with orSuspend.
func TestPauseRuncRefused(t *testing.T) {
	testenv.RequiresRoot(t)
	testenv.RequiresBinary(t, "runc", "runc")
	dir := t.TempDir()
	exe := buildExecutor(t, dir)
	rb, err := runc.New(filepath.Join(dir, "runc"))
	if err != nil {
		t.Fatal(err)
	}
	m := realManager(t, dir, exe, "runc", rb)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	info, err := m.Create(ctx, "", sandbox.Spec{Image: "busybox"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Delete(context.Background(), "", info.ID) })
	if m.CheckpointCapable("runc") {
		t.Error("runc is called checkpoint-capable")
	}
	_, _, _, err = m.Pause(ctx, "", info.ID, false)
	want := "the runc backend cannot keep a sandbox's memory: suspend it instead (reins sandbox suspend " + info.ID + ") or pass --or-suspend"
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Pause on runc: %v, want %q", err, want)
	}
	got, instead, _, err := m.Pause(ctx, "", info.ID, true)
	if err != nil || !instead || got.State != sandbox.StateSuspended {
		t.Fatalf("Pause --or-suspend on runc: %s, suspended instead %v, %v", got.State, instead, err)
	}
	if _, _, _, err := m.Pause(ctx, "", info.ID, true); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "suspended") {
		t.Errorf("pausing a suspended sandbox: %v", err)
	}
}

// ForkMemory: each fork goes on counting from the source's count (its
// memory and open file), on its own disk, with its own executor token
// (the source's no longer opens it); the source goes on too.
func TestForkMemory(t *testing.T) {
	dir := t.TempDir()
	m := gvisorManager(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	info, c := counterBox(t, ctx, m)
	forks, err := m.ForkMemory(ctx, "", info.ID, 2)
	if err != nil {
		t.Fatalf("ForkMemory: %v", err)
	}
	src, _ := m.lookup("", info.ID)
	for _, f := range forks {
		t.Cleanup(func() { m.Delete(context.Background(), "", f.ID) })
	}
	for i, f := range forks {
		if f.ID == info.ID || f.State != sandbox.StateRunning || f.Origin != "fork:"+info.ID {
			t.Fatalf("fork %d: %+v", i, f)
		}
		fc, err := m.Client(ctx, "", f.ID)
		if err != nil {
			t.Fatal(err)
		}
		n := countsIn(t, ctx, fc)
		waitCount(t, ctx, fc, n+2)
		if v := askPort(t, ctx, fc); v < n {
			t.Errorf("fork %d's listener answered %d, want at least %d", i, v, n)
		}
		shOK(t, fc, "echo mine > /workspace/fork-"+strconv.Itoa(i))
		fb, _ := m.lookup("", f.ID)
		if fb.rec.Token == src.rec.Token {
			t.Fatalf("fork %d has its source's token", i)
		}
		old, err := client.Dial(ctx, fb.endpoint(), src.rec.Token)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := old.Hello(ctx); !errors.Is(err, errdefs.ErrUnauthenticated) {
			t.Errorf("the source's token on fork %d: %v, want unauthenticated", i, err)
		}
		old.Close()
	}
	c, err = m.Client(ctx, "", info.ID)
	if err != nil {
		t.Fatal(err)
	}
	waitCount(t, ctx, c, countsIn(t, ctx, c)+2)
	if out := shOK(t, c, "ls /workspace"); strings.Contains(out, "fork-") {
		t.Errorf("a fork's file is in the source: %q", out)
	}
}
