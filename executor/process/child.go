package process

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Child is a process the executor runs for itself (the display's X server
// and window manager), not for a caller: it is in no Table, so no listing
// shows it and no Signal call reaches it, and its owner stops it. It is
// reaped by the same reaper as every other child, which is why it exists:
// when the executor is PID 1 nothing else may wait for children (os/exec
// would race the reaper for their statuses).
type Child struct {
	pid  int
	done chan struct{}
	ws   syscall.WaitStatus
}

// StartChild starts argv (argv[0] looked up in the PATH of env) in a
// process group of its own, with files as its descriptors 0, 1, 2 and on
// (nil: /dev/null, for the first three). The files are the caller's to
// close once StartChild returns.
func StartChild(argv, env []string, files []*os.File) (*Child, error) {
	if len(argv) == 0 {
		return nil, errors.New("process: StartChild needs a program")
	}
	argv0, err := lookPath(argv[0], env, "")
	if err != nil {
		return nil, err
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer devnull.Close()
	fds := make([]uintptr, max(3, len(files)))
	for i := range fds {
		fds[i] = devnull.Fd()
		if i < len(files) && files[i] != nil {
			fds[i] = files[i].Fd()
		}
	}
	c := &Child{done: make(chan struct{})}
	attr := &syscall.ProcAttr{Env: env, Files: fds, Sys: &syscall.SysProcAttr{Setpgid: true}}
	theReaper.acquire()
	c.pid, err = theReaper.spawn(func() (int, error) { return syscall.ForkExec(argv0, argv, attr) }, c.exited)
	if err != nil {
		theReaper.release()
		return nil, fmt.Errorf("starting %s: %w", argv0, err)
	}
	return c, nil
}

// exited is called by the reaper's goroutine, which release waits for:
// hence the release in a goroutine of its own.
func (c *Child) exited(ws syscall.WaitStatus) {
	c.ws = ws
	close(c.done)
	go theReaper.release()
}

// Pid is the child's process id.
func (c *Child) Pid() int { return c.pid }

// Done is closed once the child has exited and been reaped.
func (c *Child) Done() <-chan struct{} { return c.done }

// Status is how the child ended; valid once Done is closed.
func (c *Child) Status() syscall.WaitStatus { return c.ws }

// Signal sends sig to the child's process group, unless it has been reaped
// already (its pid may be someone else's by now).
func (c *Child) Signal(sig syscall.Signal) error {
	err := theReaper.kill(c.pid, sig)
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signalling process group %d: %w", c.pid, err)
	}
	return nil
}

// Describe says how a status ended, for messages: "exit status 1",
// "killed by signal 9".
func Describe(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return fmt.Sprintf("killed by signal %d (%s)", int(ws.Signal()), ws.Signal())
	}
	return fmt.Sprintf("exit status %d", ws.ExitStatus())
}
