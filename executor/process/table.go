// Package process starts, tracks and reaps the processes the executor runs.
//
// Each process is forked and exec'd directly (no shell, no helper process)
// into its own process group, so that a timeout or a Signal reaches
// everything it started. Its stdout and stderr go to bounded ring buffers
// that any number of readers stream from (Process.Stream), so output
// survives the client that asked for it: a process whose client went away
// carries on as a background process, and Attach replays what it kept.
//
// Bytes are never lost silently. A foreground reader (Mode Foreground,
// Owner) holds the process back: a pump reads no more from the pipe while
// the ring could not take it without overwriting bytes that reader has not
// read, so the pipe fills and the command blocks in write, as on a slow
// terminal. The ring is then just the pipe's buffer (1 MiB, which lets the
// reader send big chunks while the command runs on). Readers that do not
// hold it back (Follow, or a background process's) are told how many bytes
// they lost (Sink.Dropped).
//
// A Table remembers exited processes (the last Options.MaxExited) and, for
// idempotency, which process each key started (the last Options.MaxKeys
// keys): starting with a known key starts nothing and returns that process.
package process

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/errdefs"
)

// Options bound what a Table keeps. Zero values mean the defaults.
type Options struct {
	RingBytes        int           // output kept per stream of each process; default 1 MiB
	MaxExited        int           // exited processes remembered; default 256
	MaxRetainedBytes int           // output kept for exited processes in all; default 64 MiB
	MaxKeys          int           // idempotency keys remembered; default 16384
	WaitDelay        time.Duration // how long output pipes held open by others are waited for after an exit; default 250ms
	OnActivity       func()        // called on output and exits (for idle tracking)
}

func (o *Options) setDefaults() {
	if o.RingBytes <= 0 {
		o.RingBytes = 1 << 20
	}
	if o.MaxExited <= 0 {
		o.MaxExited = 256
	}
	if o.MaxRetainedBytes <= 0 {
		o.MaxRetainedBytes = 64 << 20
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = 16384
	}
	if o.WaitDelay <= 0 {
		o.WaitDelay = 250 * time.Millisecond
	}
}

// Spec is a process to start.
type Spec struct {
	Argv    []string // Argv[0] is looked up in the PATH of Env
	Env     []string // the whole environment, K=V
	Dir     string   // working directory (a path on the executor's host)
	Stdin   bool     // keep stdin open for WriteStdin; otherwise it is /dev/null
	PTY     bool
	Rows    uint16
	Cols    uint16
	Timeout time.Duration // 0: none
	Key     string        // idempotency key
	Tag     string
	// GivenEnv and Cwd are shown by listings: the variables the caller
	// gave (Env without the base environment) and Dir inside the sandbox.
	GivenEnv []string
	Cwd      string
	// Foreground: the starter streams the output with Mode Owner, and the
	// process waits for it (backpressure) instead of losing output.
	Foreground bool
	// Credential: the uid, gid and groups to run as (nil: the executor's).
	Credential *syscall.Credential
}

// Table is the set of processes an executor started.
type Table struct {
	opts    Options
	devnull *os.File
	wg      sync.WaitGroup // pumps

	mu       sync.Mutex
	closed   bool
	procs    map[int]*Process
	exited   []*Process // oldest first
	retained int        // bytes of ring buffers held by exited processes
	running  int
	keys     map[string]*keyEntry
	keyOrder []string // oldest first, from keyHead on
	keyHead  int
}

type keyEntry struct {
	ready chan struct{}
	argv  [sha256.Size]byte
	p     *Process
	err   error
}

// NewTable returns an empty table. Close it to kill what still runs.
func NewTable(opts Options) (*Table, error) {
	opts.setDefaults()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, fmt.Errorf("opening %s for the processes' stdin: %w", os.DevNull, err)
	}
	theReaper.acquire()
	return &Table{
		opts:    opts,
		devnull: devnull,
		procs:   make(map[int]*Process),
		keys:    make(map[string]*keyEntry),
	}, nil
}

func (t *Table) touch() {
	if t.opts.OnActivity != nil {
		t.opts.OnActivity()
	}
}

// Start starts the process spec describes. With a Key already seen, it
// starts nothing and returns the process that key started, with reattached
// set; a key used before for a different argv is an error.
func (t *Table) Start(spec Spec) (p *Process, reattached bool, err error) {
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, false, errdefs.WithMessage(errdefs.ErrInvalidArgument, "argv is empty; give the command to run")
	}
	if spec.Key == "" {
		p, err := t.start(spec)
		return p, false, err
	}
	sum := argvSum(spec.Argv)
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, false, errClosed
	}
	if e, ok := t.keys[spec.Key]; ok {
		t.mu.Unlock()
		<-e.ready
		if e.err != nil {
			return nil, false, e.err
		}
		if e.argv != sum {
			return nil, false, errdefs.WithMessage(errdefs.ErrAlreadyExists, fmt.Sprintf(
				"the idempotency key %q already started a different command (pid %d); use a new key", spec.Key, e.p.pid))
		}
		return e.p, true, nil
	}
	e := &keyEntry{ready: make(chan struct{}), argv: sum}
	t.keys[spec.Key] = e
	t.keyOrder = append(t.keyOrder, spec.Key)
	t.forgetKeysLocked()
	t.mu.Unlock()

	p, err = t.start(spec)
	t.mu.Lock()
	e.p, e.err = p, err
	if err != nil && t.keys[spec.Key] == e {
		delete(t.keys, spec.Key) // nothing ran: a retry may run it
	}
	t.mu.Unlock()
	close(e.ready)
	return p, false, err
}

func argvSum(argv []string) [sha256.Size]byte {
	h := sha256.New()
	for _, a := range argv {
		fmt.Fprintf(h, "%d:%s", len(a), a)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// forgetKeysLocked drops the oldest keys beyond MaxKeys.
func (t *Table) forgetKeysLocked() {
	for len(t.keys) > t.opts.MaxKeys && t.keyHead < len(t.keyOrder) {
		k := t.keyOrder[t.keyHead]
		t.keyOrder[t.keyHead] = ""
		t.keyHead++
		if e := t.keys[k]; e != nil && isClosed(e.ready) {
			delete(t.keys, k)
		}
	}
	if t.keyHead > len(t.keyOrder)/2 {
		t.keyOrder = slices.Clone(t.keyOrder[t.keyHead:])
		t.keyHead = 0
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

var errClosed = errdefs.WithMessage(errdefs.ErrUnavailable, "the executor is shutting down")

// start forks and execs spec.
func (t *Table) start(spec Spec) (*Process, error) {
	argv0, err := lookPath(spec.Argv[0], spec.Env, spec.Dir)
	if err != nil {
		return nil, err
	}
	p := &Process{t: t, argv: spec.Argv, tag: spec.Tag, key: spec.Key, pty: spec.PTY, env: spec.GivenEnv, cwd: spec.Cwd, done: make(chan struct{})}
	p.out[Stdout].max, p.out[Stderr].max = t.opts.RingBytes, t.opts.RingBytes
	p.gateWait.L = &p.mu
	if spec.Foreground {
		p.held = &gate{}
		p.gates = []*gate{p.held}
	}

	var childFds []int // closed in the parent once the child has them
	defer func() {
		for _, fd := range childFds {
			syscall.Close(fd)
		}
	}()
	attr := &syscall.ProcAttr{Dir: spec.Dir, Env: spec.Env}
	if spec.PTY {
		master, tty, err := openPTY(spec.Rows, spec.Cols)
		if err != nil {
			return nil, err
		}
		defer tty.Close()
		ttyFd := tty.Fd()
		attr.Files = []uintptr{ttyFd, ttyFd, ttyFd}
		attr.Sys = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		attr.Env = withDefault(attr.Env, "TERM", "xterm-256color")
		p.master, p.stdin, p.readers[Stdout] = master, master, master
	} else {
		var fds [3]int
		for i, stream := range []int{Stdout, Stderr} {
			r, w, err := outPipe()
			if err != nil {
				p.closeParentEnds()
				return nil, err
			}
			p.readers[stream], fds[i+1] = r, w
			childFds = append(childFds, w)
		}
		fds[0] = int(t.devnull.Fd())
		if spec.Stdin {
			r, w, err := inPipe()
			if err != nil {
				p.closeParentEnds()
				return nil, err
			}
			p.stdin, fds[0] = w, r
			childFds = append(childFds, r)
		}
		attr.Files = []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2])}
		attr.Sys = &syscall.SysProcAttr{Setpgid: true}
	}
	attr.Sys.Credential = spec.Credential

	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		p.closeParentEnds()
		return nil, errClosed
	}
	// Count the pumps before the process exists: its exit may be reaped
	// before they start, and must not finish it with its output unread.
	for _, f := range p.readers {
		if f != nil {
			p.pumps++
		}
	}
	_, err = theReaper.spawn(func() (int, error) {
		pid, err := syscall.ForkExec(argv0, spec.Argv, attr)
		if err == nil {
			p.pid, p.started = pid, monoNow()
			t.register(p)
		}
		return pid, err
	}, p.onExit)
	if err != nil {
		p.closeParentEnds()
		return nil, execError(spec, argv0, err)
	}
	p.mu.Lock()
	for stream, f := range p.readers {
		if f != nil {
			t.wg.Add(1)
			go p.pump(stream, f)
		}
	}
	if spec.Timeout > 0 && !p.reaped {
		p.timer = time.AfterFunc(spec.Timeout, p.timeout)
	}
	p.mu.Unlock()
	t.touch()
	return p, nil
}

func (p *Process) closeParentEnds() {
	for _, f := range p.readers {
		if f != nil {
			f.Close()
		}
	}
	if p.stdin != nil && !p.pty {
		p.stdin.Close()
	}
}

// timeout kills the process group of a process that ran too long.
func (p *Process) timeout() {
	p.mu.Lock()
	if p.reaped {
		p.mu.Unlock()
		return
	}
	p.timedOut = true
	p.mu.Unlock()
	theReaper.kill(p.pid, syscall.SIGKILL)
}

func (t *Table) register(p *Process) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.procs[p.pid] = p // a record of an older process with a reused pid is replaced
	t.running++
}

// finished is told by a process that it has finished: it becomes one of the
// remembered exited processes, and the oldest beyond the bounds are
// forgotten (their output first).
func (t *Table) finished(p *Process) {
	p.closeStdin()
	p.mu.Lock()
	held := len(p.out[Stdout].buf) + len(p.out[Stderr].buf)
	p.mu.Unlock()

	t.mu.Lock()
	t.running--
	t.exited = append(t.exited, p)
	t.retained += held
	for len(t.exited) > t.opts.MaxExited {
		old := t.exited[0]
		t.exited = slices.Delete(t.exited, 0, 1)
		if t.procs[old.pid] == old {
			delete(t.procs, old.pid)
		}
		t.retained -= old.release()
	}
	for i := 0; t.retained > t.opts.MaxRetainedBytes && i < len(t.exited); i++ {
		t.retained -= t.exited[i].release()
	}
	t.mu.Unlock()
	t.touch()
}

// ForgetExited forgets every process that has exited (its output too):
// the sandbox changes hands (the warm pool), and its new user sees none
// of what ran before. Processes still running are kept.
func (t *Table) ForgetExited() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.exited {
		if t.procs[p.pid] == p {
			delete(t.procs, p.pid)
		}
		t.retained -= p.release()
	}
	t.exited = nil
}

// release frees a finished process's output and returns the bytes freed.
func (p *Process) release() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out[Stdout].release() + p.out[Stderr].release()
}

// Get returns the process with the given pid, running or remembered.
func (t *Table) Get(pid int) (*Process, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.procs[pid]; p != nil {
		return p, nil
	}
	return nil, errdefs.WithMessage(errdefs.ErrNotFound, fmt.Sprintf(
		"no process with pid %d (the executor remembers the last %d exited processes)", pid, t.opts.MaxExited))
}

// List describes the running and the remembered processes, oldest first.
func (t *Table) List() []Info {
	t.mu.Lock()
	procs := make([]*Process, 0, len(t.procs))
	for _, p := range t.procs {
		procs = append(procs, p)
	}
	t.mu.Unlock()
	infos := make([]Info, len(procs))
	for i, p := range procs {
		infos[i] = p.Info()
	}
	slices.SortFunc(infos, func(a, b Info) int { return a.Started.Compare(b.Started) })
	return infos
}

// Running is the number of processes started that have not finished.
func (t *Table) Running() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.running
}

// Close kills the process group of every process still running, waits
// (boundedly) for them to finish and releases the table.
func (t *Table) Close() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	var running []*Process
	for _, p := range t.procs {
		if p.Exit() == nil {
			running = append(running, p)
		}
	}
	t.mu.Unlock()
	for _, p := range running {
		p.ungate() // a stalled foreground reader holds up nothing now
		p.Signal(syscall.SIGKILL)
	}
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	for _, p := range running {
		select {
		case <-p.done:
		case <-deadline.C:
			p.closeReaders(true) // unkillable (stuck in the kernel?): stop reading at least
		}
	}
	t.wg.Wait()
	theReaper.release()
	t.devnull.Close()
}

// The exit statuses a shell gives a command it cannot run; a start error
// carries them (errdefs.ExitCode) for a command line to exit with.
const (
	ExitNotFound      = 127
	ExitNotExecutable = 126
)

// execError explains why a process could not start.
func execError(spec Spec, argv0 string, err error) error {
	switch {
	case errors.Is(err, syscall.ENOENT):
		if _, serr := os.Stat(spec.Dir); serr != nil && spec.Dir != "" {
			return errdefs.WithMessage(errdefs.ErrNotFound, fmt.Sprintf("the working directory %s does not exist", spec.Dir))
		}
		return errdefs.WithExitCode(errdefs.WithMessage(errdefs.ErrNotFound, fmt.Sprintf(
			"command not found: %s (no such file, or its interpreter, the #! line, is missing)", argv0)), ExitNotFound)
	case errors.Is(err, syscall.EACCES):
		return errdefs.WithExitCode(errdefs.WithMessage(errdefs.ErrPermissionDenied, fmt.Sprintf(
			"%s cannot be executed (permission denied; is it executable, and its directory %s searchable?)", argv0, spec.Dir)), ExitNotExecutable)
	case errors.Is(err, syscall.ENOEXEC):
		return errdefs.WithExitCode(errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf(
			"%s cannot be executed: it is not in an executable format (a script without a #! line?)", argv0)), ExitNotExecutable)
	case errors.Is(err, syscall.ENOTDIR):
		return errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf(
			"%s or the working directory %s has a component that is not a directory", argv0, spec.Dir))
	case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.ENOMEM):
		return errdefs.WithMessage(errdefs.ErrResourceExhausted, fmt.Sprintf(
			"cannot start %s: the sandbox's process or memory limit is reached (%v)", argv0, err))
	}
	return fmt.Errorf("starting %s: %w", argv0, err)
}

// lookPath finds file in the PATH of env, the way execvp does. A name with
// a slash is used as it is (relative to dir).
func lookPath(file string, env []string, dir string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	pathEnv := getenv(env, "PATH")
	if pathEnv == "" {
		pathEnv = DefaultPath
	}
	for d := range strings.SplitSeq(pathEnv, ":") {
		if d == "" {
			d = "."
		}
		cand := d + "/" + file
		check := cand
		if !strings.HasPrefix(check, "/") && dir != "" {
			check = dir + "/" + cand
		}
		var st syscall.Stat_t
		if syscall.Stat(check, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG && st.Mode&0o111 != 0 {
			return cand, nil
		}
	}
	return "", errdefs.WithExitCode(errdefs.WithMessage(errdefs.ErrNotFound,
		fmt.Sprintf("command not found: %s (searched PATH=%s)", file, pathEnv)), ExitNotFound)
}

// DefaultPath is the PATH used when the environment has none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func getenv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key); ok && strings.HasPrefix(v, "=") {
			return v[1:]
		}
	}
	return ""
}

func withDefault(env []string, key, value string) []string {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			return env
		}
	}
	return append(env[:len(env):len(env)], key+"="+value)
}

// outPipe makes a pipe whose read end the executor polls and whose write end,
// blocking as programs expect, goes to the child. (Made non-blocking, then
// one end cleared: the fewest syscalls, which gVisor makes expensive.)
func outPipe() (*os.File, int, error) {
	p, err := pipe(1)
	if err != nil {
		return nil, -1, fmt.Errorf("making an output pipe: %w", err)
	}
	return os.NewFile(uintptr(p[0]), "|stdout"), p[1], nil
}

// inPipe is outPipe the other way round, for stdin.
func inPipe() (int, *os.File, error) {
	p, err := pipe(0)
	if err != nil {
		return -1, nil, fmt.Errorf("making a stdin pipe: %w", err)
	}
	return p[0], os.NewFile(uintptr(p[1]), "|stdin"), nil
}

// pipe makes a non-blocking pipe, except for its end blocking, the child's.
func pipe(blocking int) ([2]int, error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		return p, err
	}
	if _, err := unix.FcntlInt(uintptr(p[blocking]), unix.F_SETFL, 0); err != nil {
		syscall.Close(p[0])
		syscall.Close(p[1])
		return p, err
	}
	return p, nil
}

// openPTY opens a terminal of the given size (24x80 when zero). The master
// is returned non-blocking, so that closing it ends a pending read.
func openPTY(rows, cols uint16) (master, tty *os.File, err error) {
	m, tty, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("opening a terminal: %w", err)
	}
	if rows == 0 || cols == 0 {
		rows, cols = 24, 80
	}
	if err := pty.Setsize(tty, &pty.Winsize{Rows: rows, Cols: cols}); err != nil {
		m.Close()
		tty.Close()
		return nil, nil, fmt.Errorf("sizing a terminal: %w", err)
	}
	// creack/pty leaves the master blocking (it calls Fd); a duplicate made
	// non-blocking becomes pollable in os.NewFile.
	// (F_DUPFD_CLOEXEC: no other child forked meanwhile may inherit it.)
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	m.Close()
	if err == nil {
		err = syscall.SetNonblock(fd, true)
	}
	if err != nil {
		tty.Close()
		return nil, nil, fmt.Errorf("opening a terminal: %w", err)
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), tty, nil
}
