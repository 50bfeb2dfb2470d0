package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	runc "github.com/containerd/go-runc"
	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/sandbox/cgroup"
)

// The shim is the small process that stays with a sandbox for its whole
// life, apart from the service: the service may be killed and restarted at
// any time, yet someone must be the parent of the sandbox's init to learn how
// it ended. The service starts it by re-executing its own binary (or the one
// WithShim names) with shimEnv set; the binary's main calls MaybeRunShim
// first thing, which then never returns.
//
// The shim makes itself a child subreaper, runs `<runtime> run --detach`,
// reports the init's pid (or the runtime's error) on fd 3 and closes it,
// then waits for the init to end and writes exit.json, with the cgroup's
// OOM kill count read before the runtime's delete removes the group. It has
// its own session, ignores the signals a terminal or a dying service would
// send, and holds no pipe to the service once the init runs.
const shimEnv = "REINS_OCI_SHIM"

// shimConfig is what the shim runs, written to shim.json by Start.
type shimConfig struct {
	Version     int      `json:"version"`
	Runtime     string   `json:"runtime"`
	Root        string   `json:"root"`
	GlobalArgs  []string `json:"global_args,omitempty"`
	ID          string   `json:"id"`
	Log         string   `json:"log"`          // the init's stdout and stderr
	CgroupsPath string   `json:"cgroups_path"` // where to read the OOM count
	// Restore, when set, is a checkpoint image the init is restored from
	// (`<runtime> restore --detach`) instead of started.
	Restore string `json:"restore,omitempty"`
	// Listens: the init serves the bundle's Listen socket, and is sent
	// sandbox.RelistenSignal after a checkpoint (an init that does not
	// handle it would die of it).
	Listens bool `json:"listens,omitempty"`
}

// handshake is what the shim writes on fd 3.
type handshake struct {
	Pid   int    `json:"pid,omitempty"`
	Error string `json:"error,omitempty"`
}

// MaybeRunShim must be called at the very start of main (and of TestMain)
// in every program that uses the gvisor or runc backends. In a shim process
// it runs the shim and exits; anywhere else it returns at once.
func MaybeRunShim() {
	dir := os.Getenv(shimEnv)
	if dir == "" {
		return
	}
	os.Exit(runShim(dir))
}

func runShim(dir string) int {
	// Nothing may hold the handshake pipe but us: not the runtime, not the
	// init.
	syscall.CloseOnExec(3)
	hs := os.NewFile(3, "handshake")
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGPIPE, syscall.SIGQUIT)

	fail := func(format string, a ...any) int {
		msg := fmt.Sprintf(format, a...)
		// Say it in the record too, for a service that is no longer
		// listening on the pipe.
		_ = writeJSON(recordPath(dir, fileExit), exitRecord{Version: 1, ExitCode: -1, Error: msg})
		_ = json.NewEncoder(hs).Encode(handshake{Error: msg})
		hs.Close()
		return 1
	}
	var cfg shimConfig
	if err := readJSON(recordPath(dir, fileShim), &cfg); err != nil {
		return fail("shim: %v", err)
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fail("shim: become subreaper: %v", err)
	}
	initPid, err := runDetached(dir, cfg)
	if err != nil {
		return fail("%v", err)
	}
	self, err := refOf(os.Getpid())
	if err != nil {
		return fail("shim: %v", err)
	}
	initRef, err := refOf(initPid)
	if err != nil {
		// It ended already; wait4 below still has its status.
		initRef = procRef{Pid: initPid}
	}
	if err := writeJSON(recordPath(dir, fileStarted), started{Version: 1, Init: initRef, Shim: self}); err != nil {
		return fail("shim: %v", err)
	}
	_ = json.NewEncoder(hs).Encode(handshake{Pid: initPid})
	hs.Close()

	ws := waitFor(initPid)
	rec := exitRecord{Version: 1, ExitCode: ws.ExitStatus()}
	if ws.Signaled() {
		rec.Signal = int(ws.Signal())
		rec.ExitCode = 128 + rec.Signal
	}
	rec.OOMKills, _ = cgroup.Open(cfg.CgroupsPath).OOMKills()
	if err := writeJSON(recordPath(dir, fileExit), rec); err != nil {
		return 1
	}
	reapRest(2 * time.Second)
	return 0
}

// runDetached runs `<runtime> run --detach` (or `restore --detach`) and
// returns the init's pid.
func runDetached(dir string, cfg shimConfig) (int, error) {
	log, err := os.OpenFile(cfg.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return 0, fmt.Errorf("open init log: %w", err)
	}
	defer log.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		return 0, err
	}
	defer null.Close()
	end, _ := log.Seek(0, io.SeekEnd)

	r := &runc.Runc{Command: cfg.Runtime, Root: cfg.Root, ExtraArgs: cfg.GlobalArgs}
	pidFile := recordPath(dir, filePid)
	// The runtime hands its stdio down to the init: the log and /dev/null,
	// never a pipe whose reader could vanish.
	stdio := fileIO{in: null, out: log}
	verb := "run"
	if cfg.Restore != "" {
		verb = "restore"
		_, err = r.Restore(context.Background(), cfg.ID, dir, &runc.RestoreOpts{
			CheckpointOpts: runc.CheckpointOpts{ImagePath: cfg.Restore},
			IO:             stdio, PidFile: pidFile, Detach: true,
		})
	} else {
		_, err = r.Run(context.Background(), cfg.ID, dir, &runc.CreateOpts{IO: stdio, PidFile: pidFile, Detach: true})
	}
	if err != nil {
		return 0, fmt.Errorf("%s %s: %v: %s", cfg.Runtime, verb, err, tail(cfg.Log, end))
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, fmt.Errorf("%s %s: no pid file: %w", cfg.Runtime, verb, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s %s: pid file: %w", cfg.Runtime, verb, err)
	}
	return pid, nil
}

// waitFor reaps children (the runtime leaves the init and its helpers to us,
// the subreaper) until pid ends, and returns its status.
func waitFor(pid int) syscall.WaitStatus {
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			// No children left: the init was never ours. Report it as
			// killed, the most likely end of a process we cannot see.
			return syscall.WaitStatus(syscall.SIGKILL)
		}
		if got == pid {
			return ws
		}
	}
}

// reapRest waits a little for the runtime's helper processes (gVisor's
// gofer), so they do not linger as zombies under an init that never reaps.
func reapRest(d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err != nil && !errors.Is(err, syscall.EINTR) {
			return // ECHILD: none left
		}
		if got <= 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// tail returns what was appended to a file after offset, at most 2 KiB.
func tail(path string, offset int64) string {
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < offset {
		return ""
	}
	b = b[offset:]
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	return strings.TrimSpace(string(b))
}

// fileIO gives the runtime files as its stdio; go-runc's IO interface wants
// pipes, which is what we must avoid.
type fileIO struct{ in, out *os.File }

func (f fileIO) Close() error           { return nil }
func (f fileIO) Stdin() io.WriteCloser  { return nil }
func (f fileIO) Stdout() io.ReadCloser  { return nil }
func (f fileIO) Stderr() io.ReadCloser  { return nil }
func (f fileIO) Set(cmd *exec.Cmd)      { cmd.Stdin, cmd.Stdout, cmd.Stderr = f.in, f.out, f.out }
func (f fileIO) CloseAfterStart() error { return nil }

var _ runc.IO = fileIO{}
