package executor_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor"
	"github.com/reinsdev/reins/executor/client"
)

func TestExecOutputAndExitCodes(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		script         string
		stdout, stderr string
		code, signal   int32
		reason         string
	}{
		{script: "echo out; echo err >&2; exit 3", stdout: "out\n", stderr: "err\n", code: 3, reason: "exited"},
		{script: "true", code: 0, reason: "exited"},
		{script: "kill -TERM $$", code: 128 + 15, signal: 15, reason: "signaled"},
		{script: "printf 'a\\0b'", stdout: "a\x00b", reason: "exited"},
		{script: "pwd", stdout: e.root + "\n", reason: "exited"}, // the workdir, "/", on the host
	} {
		out, errOut, exit := e.sh(tc.script)
		if out != tc.stdout || errOut != tc.stderr || exit.ExitCode != tc.code || exit.Signal != tc.signal || exit.Reason != tc.reason {
			t.Errorf("%q: stdout %q stderr %q exit %v; want %q %q code %d signal %d %s",
				tc.script, out, errOut, exit, tc.stdout, tc.stderr, tc.code, tc.signal, tc.reason)
		}
	}
}

func TestExecEnvAndCwd(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	if err := os.Mkdir(e.host("sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	exit, err := e.c.Exec(ctx, &executorv1.ExecRequest{
		Argv: []string{"sh", "-c", `echo "$FOO $HOME"; pwd`},
		Env:  []string{"FOO=bar", "HOME=/home/x"},
		Cwd:  "sub",
	}, func(ev *executorv1.ExecEvent) { out.Write(ev.GetStdout()) })
	if err != nil || exit.ExitCode != 0 {
		t.Fatal(exit, err)
	}
	if want := "bar /home/x\n" + e.host("sub") + "\n"; out.String() != want {
		t.Errorf("output %q, want %q", out.String(), want)
	}
}

func TestExecStreamsOutputAsItComes(t *testing.T) {
	e := newEnv(t)
	var firstAt, exitAt time.Time
	var events []string
	exit, err := e.c.Exec(ctxT(t), &executorv1.ExecRequest{Argv: []string{"sh", "-c", "echo a; sleep 0.4; echo b"}},
		func(ev *executorv1.ExecEvent) {
			switch {
			case ev.GetStarted() != nil:
				events = append(events, "started")
			case ev.GetStdout() != nil:
				if firstAt.IsZero() {
					firstAt = time.Now()
				}
				events = append(events, string(ev.GetStdout()))
			case ev.GetExited() != nil:
				exitAt = time.Now()
				events = append(events, "exited")
			}
		})
	if err != nil || exit.ExitCode != 0 {
		t.Fatal(exit, err)
	}
	if got := strings.Join(events, "|"); got != "started|a\n|b\n|exited" {
		t.Errorf("events %q", got)
	}
	if d := exitAt.Sub(firstAt); d < 300*time.Millisecond {
		t.Errorf("the first output came %v before the exit: it was not streamed as it came", d)
	}
}

func TestExecErrors(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	_, _, _, err := e.c.Run(ctx, "no-such-command-xyz")
	wantKind(t, err, errdefs.ErrNotFound, "command not found: no-such-command-xyz")
	wantExitCode(t, err, 127) // as a shell exits
	_, _, _, err = e.c.Run(ctx, "/no/such/program")
	wantKind(t, err, errdefs.ErrNotFound, "command not found: /no/such/program")
	wantExitCode(t, err, 127)
	_, _, _, err = e.c.Run(ctx)
	wantKind(t, err, errdefs.ErrInvalidArgument, "argv is empty")
	_, err = e.c.Exec(ctx, &executorv1.ExecRequest{Argv: []string{"true"}, Cwd: "/missing"}, nil)
	wantKind(t, err, errdefs.ErrNotFound, "working directory")
	_, err = e.c.Exec(ctx, &executorv1.ExecRequest{Argv: []string{"true"}, Cwd: "../../.."}, nil)
	wantKind(t, err, errdefs.ErrPermissionDenied, "leaves the sandbox's root")
	e.writeHost("script", "echo hi\n")
	_, err = e.c.Exec(ctx, &executorv1.ExecRequest{Argv: []string{"./script"}}, nil)
	wantKind(t, err, errdefs.ErrPermissionDenied, "cannot be executed")
	wantExitCode(t, err, 126)
	os.Chmod(e.host("script"), 0o755) // no #! line
	_, err = e.c.Exec(ctx, &executorv1.ExecRequest{Argv: []string{"./script"}}, nil)
	wantKind(t, err, errdefs.ErrInvalidArgument, "cannot be executed")
	wantExitCode(t, err, 126)
}

func wantExitCode(t *testing.T, err error, want int) {
	t.Helper()
	if code, ok := errdefs.ExitCode(err); !ok || code != want {
		t.Errorf("%v: exit code %d (%v), want %d", err, code, ok, want)
	}
}

func TestExecStdin(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var out bytes.Buffer
	var wg sync.WaitGroup
	exit, err := e.c.Exec(ctx, &executorv1.ExecRequest{Argv: []string{"sh", "-c", "cat; echo end"}, Stdin: true},
		func(ev *executorv1.ExecEvent) {
			if s := ev.GetStarted(); s != nil {
				wg.Go(func() {
					if err := e.c.WriteStdin(ctx, s.Pid, []byte("hello\n"), false); err != nil {
						t.Error(err)
					}
					if err := e.c.WriteStdin(ctx, s.Pid, []byte("world\n"), true); err != nil {
						t.Error(err)
					}
				})
			}
			out.Write(ev.GetStdout())
		})
	wg.Wait()
	if err != nil || exit.ExitCode != 0 {
		t.Fatal(exit, err)
	}
	if out.String() != "hello\nworld\nend\n" {
		t.Errorf("output %q", out.String())
	}
	// Without stdin set, stdin is /dev/null and cannot be written.
	started, err := e.c.Start(ctx, &executorv1.ExecRequest{Argv: []string{"sleep", "5"}})
	if err != nil {
		t.Fatal(err)
	}
	wantKind(t, e.c.WriteStdin(ctx, started.Pid, []byte("x"), false), errdefs.ErrFailedPrecondition, "not open")
	e.c.Signal(ctx, started.Pid, 0)
}

func TestExecPTYAndResize(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var mu sync.Mutex
	var out bytes.Buffer
	sawFirst := make(chan int32, 1)
	var pid int32
	go func() {
		select {
		case p := <-sawFirst:
			if err := e.c.ResizePTY(ctx, p, 50, 132); err != nil {
				t.Error(err)
			}
			if err := e.c.WriteStdin(ctx, p, []byte("go\n"), false); err != nil {
				t.Error(err)
			}
		case <-ctx.Done():
		}
	}()
	exit, err := e.c.Exec(ctx, &executorv1.ExecRequest{
		Argv: []string{"sh", "-c", `stty size; [ -t 0 ] && echo tty; read x; stty size; echo "got $x"`},
		Pty:  true, Rows: 24, Cols: 80,
	}, func(ev *executorv1.ExecEvent) {
		if s := ev.GetStarted(); s != nil {
			pid = s.Pid
		}
		if ev.GetStderr() != nil {
			t.Errorf("stderr event with a pty: %q", ev.GetStderr())
		}
		mu.Lock()
		out.Write(ev.GetStdout())
		if strings.Contains(out.String(), "tty") && pid != 0 {
			select {
			case sawFirst <- pid:
			default:
			}
		}
		mu.Unlock()
	})
	if err != nil || exit.ExitCode != 0 {
		t.Fatal(exit, err, out.String())
	}
	got := strings.ReplaceAll(out.String(), "\r\n", "\n")
	for _, want := range []string{"24 80\n", "tty\n", "50 132\n", "got go\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("pty output %q lacks %q", got, want)
		}
	}
	wantKind(t, e.c.ResizePTY(ctx, pid, 10, 10), errdefs.ErrFailedPrecondition, "exited")
}

func TestExecPTYCloseStdinSendsEOF(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	started, err := e.c.Start(ctx, &executorv1.ExecRequest{Argv: []string{"cat"}, Pty: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.c.WriteStdin(ctx, started.Pid, []byte("line\n"), true); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	exit, err := e.c.Attach(ctx, started.Pid, true, func(ev *executorv1.ExecEvent) { out.Write(ev.GetStdout()) })
	if err != nil || exit.ExitCode != 0 {
		t.Fatal(exit, err)
	}
	if !strings.Contains(out.String(), "line") {
		t.Errorf("output %q", out.String())
	}
}

func TestExecTimeoutKillsTheGroupAndKeepsOutput(t *testing.T) {
	e := newEnv(t)
	start := time.Now()
	var out bytes.Buffer
	exit, err := e.c.Exec(ctxT(t), &executorv1.ExecRequest{
		Argv:      []string{"sh", "-c", "echo partial; sleep 30 & echo $! > child.pid; wait"},
		TimeoutMs: 300,
	}, func(ev *executorv1.ExecEvent) { out.Write(ev.GetStdout()) })
	if err != nil {
		t.Fatal(err)
	}
	if exit.Reason != "timeout" || exit.Signal != 9 || exit.ExitCode != 137 {
		t.Errorf("exit %v, want a timeout (SIGKILL, 137)", exit)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	if out.String() != "partial\n" {
		t.Errorf("partial output %q", out.String())
	}
	b, err := os.ReadFile(e.host("child.pid"))
	if err != nil {
		t.Fatal(err)
	}
	child, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	waitFor(t, "the background child in the group to die and be reaped", func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", child))
		return os.IsNotExist(err)
	})
}

func TestBackgroundAttachAndOutlivingTheClient(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c1, err := client.Dial(ctx, e.sock, testToken)
	if err != nil {
		t.Fatal(err)
	}
	started, err := c1.Start(ctx, &executorv1.ExecRequest{Argv: []string{"sh", "-c", "echo one; sleep 0.3; echo two >&2"}, Tag: "bg"})
	if err != nil {
		t.Fatal(err)
	}
	c1.Close()
	if started.Pid <= 0 || started.Reattached {
		t.Fatalf("Started %v", started)
	}
	procs, err := e.c.ListProcesses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 1 || procs[0].Pid != started.Pid || !procs[0].Running || procs[0].Tag != "bg" {
		t.Fatalf("ListProcesses %v", procs)
	}
	// Without follow: what there is so far, and no exit.
	exit, err := e.c.Attach(ctx, started.Pid, false, nil)
	if err != nil || exit != nil {
		t.Fatalf("Attach without follow while running: %v %v", exit, err)
	}
	var events []string
	exit, err = e.c.Attach(ctx, started.Pid, true, func(ev *executorv1.ExecEvent) {
		switch {
		case ev.GetStarted() != nil:
			events = append(events, fmt.Sprintf("started reattached=%v", ev.GetStarted().Reattached))
		case ev.GetStdout() != nil:
			events = append(events, "out:"+string(ev.GetStdout()))
		case ev.GetStderr() != nil:
			events = append(events, "err:"+string(ev.GetStderr()))
		}
	})
	if err != nil || exit.ExitCode != 0 {
		t.Fatal(exit, err)
	}
	if got := strings.Join(events, "|"); got != "started reattached=true|out:one\n|err:two\n" {
		t.Errorf("Attach events %q", got)
	}
	// After the exit, Attach replays everything and the exit.
	var replay bytes.Buffer
	exit, err = e.c.Attach(ctx, started.Pid, false, func(ev *executorv1.ExecEvent) { replay.Write(ev.GetStdout()) })
	if err != nil || exit == nil || replay.String() != "one\n" {
		t.Errorf("replay after exit: %q %v %v", replay.String(), exit, err)
	}
	_, err = e.c.Attach(ctx, 999999, true, nil)
	wantKind(t, err, errdefs.ErrNotFound, "no process with pid 999999")
}

func TestAttachReportsDroppedOutput(t *testing.T) {
	e := newEnv(t, func(c *executor.Config) { c.RingBytes = 4096 })
	ctx := ctxT(t)
	const total = 100000
	started, err := e.c.Start(ctx, &executorv1.ExecRequest{Argv: []string{"sh", "-c", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' x", total)}})
	if err != nil {
		t.Fatal(err)
	}
	// Let it finish unread, so the ring buffer overflows.
	waitFor(t, "the process to exit", func() bool {
		procs, _ := e.c.ListProcesses(ctx)
		return len(procs) == 1 && !procs[0].Running
	})
	var dropped uint64
	var got int
	var order []string
	exit, err := e.c.Attach(ctx, started.Pid, true, func(ev *executorv1.ExecEvent) {
		if d := ev.GetDropped(); d != nil {
			dropped += d.StdoutBytes
			order = append(order, "dropped")
		}
		if out := ev.GetStdout(); out != nil {
			got += len(out)
			order = append(order, "out")
		}
	})
	if err != nil || exit.ExitCode != 0 {
		t.Fatal(exit, err)
	}
	if got != 4096 || dropped != total-4096 || order[0] != "dropped" {
		t.Errorf("got %d bytes, dropped %d (events %v); want 4096 and %d, dropped first", got, dropped, order, total-4096)
	}
}

func TestForegroundClientDisconnectDoesNotKill(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	var pid int32
	_, err := e.c.Exec(ctx, &executorv1.ExecRequest{Argv: []string{"sh", "-c", "sleep 0.3; echo done"}},
		func(ev *executorv1.ExecEvent) {
			if s := ev.GetStarted(); s != nil {
				pid = s.Pid
				cancel() // the client goes away
			}
		})
	if err == nil {
		t.Fatal("Exec with a cancelled context returned no error")
	}
	var out bytes.Buffer
	exit, err := e.c.Attach(ctxT(t), pid, true, func(ev *executorv1.ExecEvent) { out.Write(ev.GetStdout()) })
	if err != nil || exit.ExitCode != 0 || out.String() != "done\n" {
		t.Errorf("after the client left: %q %v %v", out.String(), exit, err)
	}
}

func TestSignal(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	started, err := e.c.Start(ctx, &executorv1.ExecRequest{Argv: []string{"sh", "-c", "sleep 30 & echo $! > child.pid; wait"}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "child.pid", func() bool { b, _ := os.ReadFile(e.host("child.pid")); return len(b) > 0 })
	b, _ := os.ReadFile(e.host("child.pid"))
	child, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err := e.c.Signal(ctx, started.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exit, err := e.c.Attach(ctx, started.Pid, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if exit.Signal != 15 || exit.ExitCode != 143 || exit.Reason != "killed" {
		t.Errorf("exit %v, want killed by SIGTERM", exit)
	}
	waitFor(t, "the whole group to get the signal", func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", child))
		return os.IsNotExist(err)
	})
	// Signalling a process that has exited does nothing.
	if err := e.c.Signal(ctx, started.Pid, 0); err != nil {
		t.Errorf("Signal after exit: %v", err)
	}
	wantKind(t, e.c.Signal(ctx, 999999, 0), errdefs.ErrNotFound)
}

func TestIdempotency(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	req := &executorv1.ExecRequest{Argv: []string{"sh", "-c", "echo ran >> count; echo hi; exit 7"}, IdempotencyKey: "run1/step2/call3"}
	for i := range 3 {
		var out bytes.Buffer
		var started *executorv1.Started
		exit, err := e.c.Exec(ctx, req, func(ev *executorv1.ExecEvent) {
			if s := ev.GetStarted(); s != nil {
				started = s
			}
			out.Write(ev.GetStdout())
		})
		if err != nil || exit.ExitCode != 7 || out.String() != "hi\n" {
			t.Fatalf("call %d: %q %v %v", i, out.String(), exit, err)
		}
		if started.Reattached != (i > 0) {
			t.Errorf("call %d: reattached=%v", i, started.Reattached)
		}
	}
	// Concurrent calls with one key run the command once too.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			_, err := e.c.Exec(ctx, &executorv1.ExecRequest{Argv: []string{"sh", "-c", "echo ran >> count2"}, IdempotencyKey: "k2"}, nil)
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, f := range []string{"count", "count2"} {
		b, err := os.ReadFile(e.host(f))
		if err != nil || string(b) != "ran\n" {
			t.Errorf("%s = %q, %v; want one run", f, b, err)
		}
	}
	_, err := e.c.Exec(ctx, &executorv1.ExecRequest{Argv: []string{"true"}, IdempotencyKey: "k2"}, nil)
	wantKind(t, err, errdefs.ErrAlreadyExists, "different command")
}

func TestIdempotencyOutlivesForgottenProcesses(t *testing.T) {
	e := newEnv(t, func(c *executor.Config) { c.MaxExited = 2 })
	ctx := ctxT(t)
	req := &executorv1.ExecRequest{Argv: []string{"sh", "-c", "echo ran >> count; echo out; exit 4"}, IdempotencyKey: "old"}
	if _, err := e.c.Exec(ctx, req, nil); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		e.sh("true")
	}
	procs, err := e.c.ListProcesses(ctx)
	if err != nil || len(procs) != 2 {
		t.Fatalf("ListProcesses keeps %d (%v), want the last 2", len(procs), err)
	}
	var dropped uint64
	exit, err := e.c.Exec(ctx, req, func(ev *executorv1.ExecEvent) { dropped += ev.GetDropped().GetStdoutBytes() })
	if err != nil || exit.ExitCode != 4 || dropped != 4 {
		t.Errorf("reattach to a forgotten process: exit %v dropped %d, %v", exit, dropped, err)
	}
	if b, _ := os.ReadFile(e.host("count")); string(b) != "ran\n" {
		t.Errorf("count = %q", b)
	}
}

// TestReaping runs processes that leave orphans behind while others exit
// with known codes: the orphans must be reaped (no zombies) and no exit
// status may be lost to the reaper.
func TestReaping(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			script := fmt.Sprintf("sleep 0.0%d & exit %d", i%10, i)
			_, _, exit, err := e.c.Run(ctx, "sh", "-c", script)
			if err != nil || exit.ExitCode != int32(i) {
				t.Errorf("%q: %v %v", script, exit, err)
			}
		})
	}
	wg.Wait()
	waitFor(t, "no zombie children", func() bool { return zombies(t) == 0 })
}

// zombies counts this process's zombie children.
func zombies(t *testing.T) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	me := strconv.Itoa(os.Getpid())
	for _, de := range entries {
		b, err := os.ReadFile("/proc/" + de.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[0] == "Z" && f[1] == me {
			n++
		}
	}
	return n
}

func TestCloseKillsProcessGroups(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	if _, err := e.c.Start(ctx, &executorv1.ExecRequest{Argv: []string{"sh", "-c", "sleep 60 & echo $! > child.pid; wait"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "child.pid", func() bool { b, _ := os.ReadFile(e.host("child.pid")); return len(b) > 0 })
	b, _ := os.ReadFile(e.host("child.pid"))
	child, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	e.srv.Close()
	// Killed: gone, or a zombie nobody reaps any more (the reaper stops
	// with the last server; as init, the executor exits right after).
	waitFor(t, "the background process to be killed", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		return os.IsNotExist(err) || strings.Contains(string(b), ") Z ")
	})
}
