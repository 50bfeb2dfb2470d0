package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/errdefs"
)

// Reasons a process ended, as reported in Exit.Reason.
const (
	ReasonExited   = "exited"   // it exited on its own
	ReasonSignaled = "signaled" // a signal nobody here sent killed it
	ReasonTimeout  = "timeout"  // its timeout expired and its group was killed
	ReasonKilled   = "killed"   // a Signal call killed it
)

// Exit is how a process ended.
type Exit struct {
	Code     int // 128+signal when a signal killed it
	Signal   int // 0 when it exited on its own
	Reason   string
	Duration time.Duration
}

// Output streams.
const (
	Stdout = 0
	Stderr = 1
)

// Sink receives a process's events from Stream, in order.
type Sink interface {
	Output(stream int, data []byte) error
	Dropped(stdout, stderr uint64) error
	Exited(Exit) error
}

// Info describes a process for listings.
type Info struct {
	Pid     int
	Argv    []string
	Tag     string
	Key     string
	PTY     bool
	Env     []string // the variables its starter gave
	Cwd     string   // inside the sandbox
	Started time.Time
	Exit    *Exit // nil while running
}

// Process is one process started by a Table. Its lifecycle:
//
//	started ──▶ reaped (exit status known) ──▶ finished (output drained; Exit set)
//
// It is finished when its status is known and its output pipes reached EOF,
// or WaitDelay after its status is known if something else (a background
// grandchild) keeps them open; they are then closed.
type Process struct {
	t       *Table
	pid     int
	argv    []string
	tag     string
	key     string
	env     []string
	cwd     string
	pty     bool
	started time.Duration // monoNow() when it started

	stdinMu sync.Mutex
	stdin   *os.File // pipe write end or the pty master; nil when closed

	mu       sync.Mutex
	out      [2]ring
	readers  [2]*os.File
	master   *os.File // pty master (also readers[0] and stdin)
	pumps    int
	reaped   bool
	ws       syscall.WaitStatus
	reapedAt time.Duration
	timedOut bool
	signaled bool
	timer    *time.Timer
	grace    *time.Timer
	exit     *Exit
	done     chan struct{}
	subs     []chan struct{}

	// Backpressure (see Stream): a pump reads no more while a foreground
	// reader would lose what it reads.
	gates    []*gate
	held     *gate     // registered at start for the starter's Stream (Spec.Foreground)
	gateWait sync.Cond // on mu; pumps wait here
	waiting  [2]bool   // a pump waits for a foreground reader
	ungated  bool      // the table is closing: pumps wait for no one
	graceDue bool      // WaitDelay ran out while a pump was waiting
}

// gate is one foreground reader's position in each stream.
type gate struct{ pos [2]uint64 }

// The clock. time.Now reads two clocks, each a syscall where the vDSO is
// not used (gVisor's ptrace platform); the hot paths keep monotonic offsets
// from epoch, one clock read, and turn them into wall time when asked.
var epoch = time.Now()

// monoNow is the monotonic time since the package started.
func monoNow() time.Duration { return time.Since(epoch) }

// MonoNow is the monotonic time since the package started, for stamps that
// are compared, or turned into wall time with WallTime only when shown.
func MonoNow() time.Duration { return monoNow() }

// WallTime is the wall time of the monotonic stamp m, as of now.
func WallTime(m time.Duration) time.Time { return time.Now().Add(m - monoNow()) }

var readPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
var chunkPool = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// Pid is the process's id.
func (p *Process) Pid() int { return p.pid }

// PTY reports whether the process runs on a terminal.
func (p *Process) PTY() bool { return p.pty }

// Done is closed when the process has finished.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exit returns how the process ended, or nil while it runs.
func (p *Process) Exit() *Exit {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit
}

// Info describes the process.
func (p *Process) Info() Info {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Info{Pid: p.pid, Argv: p.argv, Tag: p.tag, Key: p.key, PTY: p.pty, Env: p.env, Cwd: p.cwd, Started: WallTime(p.started), Exit: p.exit}
}

// pump copies one output stream into its ring until EOF (or until the
// stream is closed under it).
func (p *Process) pump(stream int, f *os.File) {
	defer p.t.wg.Done()
	bp := readPool.Get().(*[]byte)
	buf := (*bp)[:min(len(*bp), p.out[stream].max)]
	for {
		n, err := f.Read(buf)
		if n > 0 {
			p.mu.Lock()
			p.out[stream].write(buf[:n])
			p.wakeLocked()
			p.waitRoomLocked(stream, len(buf))
			p.mu.Unlock()
			p.t.touch()
		}
		if err != nil {
			break // EOF; EIO from a pty whose other side closed; or closed by us
		}
	}
	readPool.Put(bp)
	p.mu.Lock()
	p.pumps--
	last := p.pumps == 0 && !p.reaped
	fin := p.finishLocked()
	p.mu.Unlock()
	if fin {
		p.t.finished(p)
	}
	if last {
		theReaper.tryReap(p.pid) // finishes it at once if it has exited
	}
}

// waitRoomLocked waits until the ring of stream can take next more bytes
// without overwriting any a foreground reader has not read: the pipe then
// fills and the process blocks in write, as it would writing to a slow
// terminal. Waiting for a reader does not count against WaitDelay.
func (p *Process) waitRoomLocked(stream, next int) {
	r := &p.out[stream]
	for !p.ungated && len(p.gates) > 0 {
		slowest := r.total
		for _, g := range p.gates {
			slowest = min(slowest, g.pos[stream])
		}
		if r.total-slowest+uint64(next) <= uint64(r.max) {
			break
		}
		p.waiting[stream] = true
		p.gateWait.Wait()
		p.waiting[stream] = false
	}
	if p.graceDue && !p.waiting[0] && !p.waiting[1] {
		p.graceDue = false
		p.grace = time.AfterFunc(p.t.opts.WaitDelay, func() { p.closeReaders(false) })
	}
}

// addGateLocked registers a foreground reader. It starts at the first byte
// ever written, so that its first read reports what the ring lost before it
// joined (and moves it to the oldest byte held).
func (p *Process) addGateLocked() *gate {
	g := &gate{}
	p.gates = append(p.gates, g)
	return g
}

func (p *Process) removeGate(g *gate) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gates = slices.DeleteFunc(p.gates, func(x *gate) bool { return x == g })
	if p.held == g {
		p.held = nil
	}
	p.gateWait.Broadcast()
}

// ReleaseHold gives up the foreground reader a Spec.Foreground start
// registered, for a starter that will not stream after all: the process
// then runs as a background one.
func (p *Process) ReleaseHold() {
	p.mu.Lock()
	g := p.held
	p.mu.Unlock()
	if g != nil {
		p.removeGate(g)
	}
}

// ungate lets the pumps read on regardless of readers (the table closes).
func (p *Process) ungate() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ungated = true
	p.gateWait.Broadcast()
}

// onExit receives the exit status from the reaper.
func (p *Process) onExit(ws syscall.WaitStatus) {
	p.mu.Lock()
	p.reaped, p.ws, p.reapedAt = true, ws, monoNow()
	if p.timer != nil {
		p.timer.Stop()
	}
	if p.pumps > 0 {
		p.grace = time.AfterFunc(p.t.opts.WaitDelay, func() { p.closeReaders(false) })
	}
	fin := p.finishLocked()
	p.mu.Unlock()
	if fin {
		p.t.finished(p)
	}
}

// closeReaders ends the pumps of a process whose output pipes are held open
// by processes it left behind. A pump waiting for a foreground reader is
// not cut (what the pipe holds may be the process's own last output): its
// WaitDelay starts again once the reader catches up. With force, every
// pump ends.
func (p *Process) closeReaders(force bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for stream, f := range p.readers {
		if f == nil {
			continue
		}
		if !force && p.waiting[stream] {
			p.graceDue = true
			continue
		}
		f.Close()
	}
}

// finishLocked sets Exit once the status is known and the output drained.
// It reports whether it did, for the caller to tell the table (after
// unlocking p.mu: the table's lock comes first).
func (p *Process) finishLocked() bool {
	if !p.reaped || p.pumps > 0 || p.exit != nil {
		return false
	}
	e := Exit{Duration: p.reapedAt - p.started, Reason: ReasonExited}
	switch {
	case p.ws.Signaled():
		e.Signal = int(p.ws.Signal())
		e.Code = 128 + e.Signal
		e.Reason = ReasonSignaled
		if p.signaled {
			e.Reason = ReasonKilled
		}
	default:
		e.Code = p.ws.ExitStatus()
	}
	if p.timedOut {
		e.Reason = ReasonTimeout
	}
	p.exit = &e
	if p.grace != nil {
		p.grace.Stop()
	}
	for i, f := range p.readers {
		if f != nil {
			f.Close()
			p.readers[i] = nil
		}
	}
	p.master = nil
	close(p.done)
	p.wakeLocked()
	return true
}

func (p *Process) wakeLocked() {
	for _, c := range p.subs {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// How Stream reads a process's output.
type Mode int

const (
	// Replay sends the output held now, and the exit if it has finished.
	Replay Mode = iota
	// Follow sends the output held, then the rest as it comes, and the
	// exit. The ring buffers are bounded: a reader that falls behind is
	// told how many bytes it lost (Dropped), the process never waits.
	Follow
	// Foreground is Follow with backpressure: from where it joins, the
	// process waits for this reader (its writes block once the pipe is
	// full), so nothing more is lost.
	Foreground
	// Owner is Foreground for the caller that started the process with
	// Spec.Foreground: its reader was in place before the first byte, so
	// nothing is lost at all.
	Owner
)

// Stream sends the output the process still holds to s, then, following,
// the rest as it comes, and its Exit once it has finished (with Replay only
// if it already has). Bytes lost from the ring buffers are reported with
// Dropped before the output that follows the gap.
func (p *Process) Stream(ctx context.Context, mode Mode, s Sink) error {
	var wake chan struct{}
	var g *gate
	if mode != Replay {
		wake = make(chan struct{}, 1)
		p.mu.Lock()
		p.subs = append(p.subs, wake)
		switch {
		case mode == Owner && p.held != nil:
			g, p.held = p.held, nil
		case mode >= Foreground:
			g = p.addGateLocked()
		}
		p.mu.Unlock()
		defer p.unsubscribe(wake)
		if g != nil {
			defer p.removeGate(g)
		}
	}
	bp := chunkPool.Get().(*[]byte)
	defer chunkPool.Put(bp)
	buf := *bp
	var own [2]uint64
	pos := &own
	if g != nil {
		pos = &g.pos // read and written under p.mu
	}
	for {
		sent := false
		for stream := range 2 {
			p.mu.Lock()
			n, dropped := p.out[stream].read(&pos[stream], buf)
			if p.waiting[stream] {
				p.gateWait.Broadcast()
			}
			p.mu.Unlock()
			if dropped > 0 {
				var d [2]uint64
				d[stream] = dropped
				if err := s.Dropped(d[0], d[1]); err != nil {
					return err
				}
			}
			if n > 0 {
				sent = true
				if err := s.Output(stream, buf[:n]); err != nil {
					return err
				}
			}
		}
		if sent {
			continue
		}
		p.mu.Lock()
		exit := p.exit
		caughtUp := pos[0] == p.out[0].total && pos[1] == p.out[1].total
		p.mu.Unlock()
		if caughtUp && exit != nil {
			return s.Exited(*exit)
		}
		if mode == Replay {
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (p *Process) unsubscribe(c chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, s := range p.subs {
		if s == c {
			p.subs = append(p.subs[:i], p.subs[i+1:]...)
			return
		}
	}
}

// WriteStdin writes data to the process's stdin (its terminal with a PTY)
// and, with closeStdin, closes it; on a terminal closing sends end-of-file
// (^D), which ends input at the start of a line.
func (p *Process) WriteStdin(ctx context.Context, data []byte, closeStdin bool) error {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	f := p.stdin
	if f == nil {
		if p.Exit() != nil {
			return errdefs.WithMessage(errdefs.ErrFailedPrecondition, fmt.Sprintf("process %d has exited", p.pid))
		}
		return errdefs.WithMessage(errdefs.ErrFailedPrecondition, fmt.Sprintf(
			"the stdin of process %d is not open (start it with stdin or pty set; it is closed after close)", p.pid))
	}
	if p.pty && closeStdin {
		data = append(data[:len(data):len(data)], 4)
	}
	if len(data) > 0 {
		stop := context.AfterFunc(ctx, func() { f.SetWriteDeadline(time.Unix(1, 0)) })
		_, err := f.Write(data)
		if !stop() {
			f.SetWriteDeadline(time.Time{})
		}
		if err != nil {
			return p.stdinError(ctx, err)
		}
	}
	if closeStdin && !p.pty {
		f.Close()
		p.stdin = nil
	}
	return nil
}

func (p *Process) stdinError(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("writing to the stdin of process %d (it is not reading it): %w", p.pid, ctx.Err())
	case errors.Is(err, syscall.EPIPE), errors.Is(err, os.ErrClosed), errors.Is(err, syscall.EIO):
		return errdefs.WithMessage(errdefs.ErrFailedPrecondition, fmt.Sprintf("process %d closed its stdin (or exited)", p.pid))
	}
	return fmt.Errorf("writing to the stdin of process %d: %w", p.pid, err)
}

// closeStdin closes the stdin pipe of a finished process.
func (p *Process) closeStdin() {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin != nil && !p.pty {
		p.stdin.Close()
	}
	p.stdin = nil
}

// Resize sets the size of the process's terminal; the kernel tells the
// terminal's foreground process group with SIGWINCH.
func (p *Process) Resize(rows, cols uint16) error {
	if !p.pty {
		return errdefs.WithMessage(errdefs.ErrFailedPrecondition, fmt.Sprintf(
			"process %d has no terminal (start it with pty set)", p.pid))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.master == nil {
		return errdefs.WithMessage(errdefs.ErrFailedPrecondition, fmt.Sprintf("process %d has exited", p.pid))
	}
	return setWinsize(p.master, rows, cols)
}

// Signal sends sig to the process's whole process group. Signalling a
// process that has already been reaped does nothing: its pid may belong to
// someone else by now.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	if !p.reaped {
		p.signaled = true
	}
	p.mu.Unlock()
	err := theReaper.kill(p.pid, sig)
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signalling process group %d: %w", p.pid, err)
	}
	return nil
}

func setWinsize(f *os.File, rows, cols uint16) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		serr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	})
	if err != nil {
		return err
	}
	return serr
}
