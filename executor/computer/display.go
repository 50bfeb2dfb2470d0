// Package computer is the executor's display: an X server (Xvfb) and a
// window manager it starts on the first call and keeps running, and the
// actions of Anthropic's computer-use tool spoken to X11 directly
// (github.com/jezek/xgb): GetImage for screenshots, XTEST for the mouse
// and the keyboard. No xdotool, scrot or ImageMagick is on this path.
//
// A Display's life:
//
//	configured ──first Do or Start──▶ running ──Close──▶ closed
//	                                    │  ▲
//	                the X server dies   ▼  │ the next call starts it again (and says so in its note)
//	                                  stopped
//
// The X server listens on its unix socket file only (-nolisten tcp
// -nolisten local: no TCP, no abstract socket), inside the sandbox's own
// filesystem, with no authorization cookie: it is there for the sandbox's own
// programs (anything the model runs gets DISPLAY), which are all as trusted
// as each other; the sandbox is the boundary (docs/decisions, x11-display).
//
// Calls are serialized: one action at a time per display, as a person has
// one mouse and one keyboard.
package computer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"
	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor/process"
)

// Screen bounds, the same as package sandbox's (which the executor may not
// import): a display is 320..4096 pixels each way.
const (
	MinSide = 320
	MaxSide = 4096
)

// DefaultWindowManagers are tried in order when Config.WindowManager is "":
// the first one found in the PATH is started. Matchbox without title bars
// gives every window the whole screen, which suits a model best.
var DefaultWindowManagers = [][]string{
	{"matchbox-window-manager", "-use_titlebar", "no"},
	{"openbox"},
}

// Config configures a Display.
type Config struct {
	Width, Height int
	// Number is the X display number (:0, socket /tmp/.X11-unix/X0).
	// AnyNumber lets the X server pick a free one instead (tests).
	Number    int
	AnyNumber bool
	// Xvfb is the X server program (default "Xvfb").
	Xvfb string
	// WindowManager is the window manager's command line (split on
	// spaces), "none" for none, "" for the first of
	// DefaultWindowManagers found.
	WindowManager string
	// Env is the environment of the X server and the window manager
	// (their PATH is looked up in it); DISPLAY is added.
	Env []string
	// StartTimeout bounds how long the X server may take to be ready
	// (default 20 s).
	StartTimeout time.Duration
	Logger       *slog.Logger
}

// ParseSize parses "WxH" within MinSide..MaxSide.
func ParseSize(s string) (w, h int, err error) {
	ws, hs, ok := strings.Cut(strings.ToLower(strings.TrimSpace(s)), "x")
	w, err1 := strconv.Atoi(ws)
	h, err2 := strconv.Atoi(hs)
	if !ok || err1 != nil || err2 != nil || w < MinSide || h < MinSide || w > MaxSide || h > MaxSide {
		return 0, 0, errdefs.WithMessage(errdefs.ErrInvalidArgument,
			fmt.Sprintf("display size %q: give WIDTHxHEIGHT in pixels, each %d..%d (for example 1280x800)", s, MinSide, MaxSide))
	}
	return w, h, nil
}

// Display is one X display and what drives it.
type Display struct {
	cfg     Config
	log     *slog.Logger
	closing chan struct{}
	server  atomic.Pointer[process.Child] // the X server, once started

	mu     sync.Mutex // one action at a time; guards everything below
	closed bool
	x      *xserver // nil until started
	number int      // the display number in use, once started
	notes  []string // said in the next answer's note
	// wmStarts counts window manager starts, to stop restarting one that
	// keeps dying.
	wmStarts int
}

// xserver is a running X server, its connection and its window manager.
type xserver struct {
	proc   *process.Child
	out    *tailBuffer
	conn   *xgb.Conn
	nc     net.Conn // conn's socket: closing it ends a call that waits on a reply
	root   xproto.Window
	width  int
	height int
	wm     *process.Child
	// lost is closed when the connection ends (the event reader sees it).
	lost chan struct{}
	// cut is set when the executor itself cut the connection (a call's
	// context ended while it waited on the server).
	cut atomic.Bool
}

var quietXgb sync.Once

// New returns a Display for cfg; nothing starts until the first call.
func New(cfg Config) (*Display, error) {
	if cfg.Width < MinSide || cfg.Height < MinSide || cfg.Width > MaxSide || cfg.Height > MaxSide {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument,
			fmt.Sprintf("display size %dx%d: each side must be %d..%d pixels", cfg.Width, cfg.Height, MinSide, MaxSide))
	}
	if cfg.Xvfb == "" {
		cfg.Xvfb = "Xvfb"
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 20 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	// xgb logs to stderr when it finds no Xauthority file, which is the
	// normal case here (the server asks for none).
	quietXgb.Do(func() { xgb.Logger = log.New(io.Discard, "", 0) })
	return &Display{cfg: cfg, log: cfg.Logger, closing: make(chan struct{})}, nil
}

// Size is the display's size in pixels.
func (d *Display) Size() (w, h int) { return d.cfg.Width, d.cfg.Height }

// Running reports whether the X server has been started and is running.
// It does not wait for a call in progress.
func (d *Display) Running() bool {
	p := d.server.Load()
	return p != nil && !isDone(p.Done())
}

// Name is the DISPLAY value of the configured display (":0"), for the
// environment of the sandbox's processes. With AnyNumber it is known only
// once started.
func (d *Display) Name() string {
	return ":" + strconv.Itoa(d.cfg.Number)
}

// Start starts the X server and the window manager now if they are not
// running (a process about to be run will want them).
func (d *Display) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, err := d.ensureLocked(ctx)
	return err
}

// Number is the display number in use, once started.
func (d *Display) Number() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.number
}

// ensureLocked returns the running X server, starting it (again) if needed.
func (d *Display) ensureLocked(ctx context.Context) (*xserver, error) {
	if d.closed {
		return nil, errdefs.WithMessage(errdefs.ErrUnavailable, "the display is shut down: the executor is stopping")
	}
	if d.x != nil && isDone(d.x.proc.Done()) {
		why := process.Describe(d.x.proc.Status())
		d.log.Warn("the X server stopped; starting it again", "status", why, "output", d.x.out.String())
		d.notes = append(d.notes, fmt.Sprintf("the X server had stopped (%s) and was started again: windows open before are gone; start the programs again", why))
		d.stopLocked()
	}
	if d.x != nil && d.x.cut.Load() {
		// The executor cut the connection (cutOnDone) and the call it cut
		// has returned: wait for the connection's reader to see it end,
		// so that it is made again below rather than used dead.
		select {
		case <-d.x.lost:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the cut X connection to close: %w", ctx.Err())
		}
	}
	if d.x != nil && isDone(d.x.lost) {
		// The connection ended: cut by the executor when a call's
		// context ended while the server did not answer (a program
		// holds a grab of the server?), or closed by the server. The
		// server still running, connect to it again (its windows are
		// kept); else start it again rather than fail from now on.
		x := d.x
		if err := x.reconnect(d.number); err == nil {
			if !x.cut.Load() {
				d.notes = append(d.notes, "the connection to the X server was lost and was made again")
			}
			x.cut.Store(false)
			go d.readEvents(x)
		} else {
			d.log.Warn("the connection to the X server was lost; starting it again", "err", err)
			d.notes = append(d.notes, "the connection to the X server was lost and the X server was started again: windows open before are gone; start the programs again")
			d.stopLocked()
		}
	}
	if d.x == nil {
		x, err := d.startX(ctx)
		if err != nil {
			return nil, err
		}
		d.x = x
		d.server.Store(x.proc)
		go d.readEvents(x)
	}
	d.ensureWMLocked()
	return d.x, nil
}

// startX starts Xvfb, waits until it is ready (it writes its display
// number to -displayfd then) and connects.
func (d *Display) startX(ctx context.Context) (*xserver, error) {
	ready, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer ready.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		readyW.Close()
		return nil, err
	}
	argv := []string{d.cfg.Xvfb}
	if !d.cfg.AnyNumber {
		argv = append(argv, ":"+strconv.Itoa(d.cfg.Number))
	}
	argv = append(argv, "-screen", "0", fmt.Sprintf("%dx%dx24", d.cfg.Width, d.cfg.Height),
		"-nolisten", "tcp", "-nolisten", "local", "-noreset", "-displayfd", "3")
	proc, err := process.StartChild(argv, d.cfg.Env, []*os.File{nil, outW, outW, readyW})
	readyW.Close()
	outW.Close()
	if err != nil {
		outR.Close()
		return nil, errdefs.WithMessage(errdefs.ErrFailedPrecondition,
			fmt.Sprintf("cannot start the X server (%s): %v; this sandbox's image lacks Xvfb: use --image desktop", d.cfg.Xvfb, err))
	}
	x := &xserver{proc: proc, out: &tailBuffer{max: 4 << 10}, width: d.cfg.Width, height: d.cfg.Height, lost: make(chan struct{})}
	go x.out.readFrom(outR)

	number, err := d.waitReady(ctx, ready, proc)
	if err == nil {
		err = x.connect(number)
	}
	if err != nil {
		proc.Signal(syscall.SIGKILL)
		<-proc.Done()
		return nil, fmt.Errorf("starting the X server: %w (its output: %s)", err, strings.TrimSpace(x.out.String()))
	}
	d.number = number
	d.log.Info("X server started", "display", number, "size", fmt.Sprintf("%dx%d", x.width, x.height))
	return x, nil
}

// waitReady reads the display number Xvfb writes once it accepts
// connections, or fails when it exits first or takes too long.
func (d *Display) waitReady(ctx context.Context, ready *os.File, proc *process.Child) (int, error) {
	type result struct {
		line string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		line, err := bufio.NewReaderSize(io.LimitReader(ready, 64), 64).ReadString('\n')
		got <- result{line, err}
	}()
	timer := time.NewTimer(d.cfg.StartTimeout)
	defer timer.Stop()
	select {
	case r := <-got:
		n, err := strconv.Atoi(strings.TrimSpace(r.line))
		if err != nil {
			<-proc.Done()
			return 0, fmt.Errorf("it exited at start (%s)", process.Describe(proc.Status()))
		}
		return n, nil
	case <-timer.C:
		return 0, fmt.Errorf("it was not ready after %v", d.cfg.StartTimeout)
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-d.closing:
		return 0, errors.New("the executor is stopping")
	}
}

// socketPath is where display n listens.
func socketPath(n int) string { return "/tmp/.X11-unix/X" + strconv.Itoa(n) }

// connectTimeout bounds connecting to the X server (the set-up and the
// XTEST query): a server that does not answer (grabbed by a program) is
// not waited on for ever.
const connectTimeout = 5 * time.Second

func (x *xserver) connect(number int) error {
	nc, err := net.DialTimeout("unix", socketPath(number), connectTimeout)
	if err != nil {
		return err
	}
	if err := x.checkPeer(nc); err != nil {
		nc.Close()
		return err
	}
	nc.SetDeadline(time.Now().Add(connectTimeout))
	conn, err := xgb.NewConnNet(nc)
	if err != nil {
		nc.Close()
		return err
	}
	if err := xtest.Init(conn); err != nil {
		conn.Close()
		nc.Close()
		return fmt.Errorf("the X server lacks the XTEST extension: %w", err)
	}
	setup := xproto.Setup(conn)
	screen := setup.DefaultScreen(conn)
	if err := checkPixmapFormat(setup, screen); err != nil {
		conn.Close()
		nc.Close()
		return err
	}
	nc.SetDeadline(time.Time{})
	x.conn, x.nc, x.root = conn, nc, screen.Root
	x.width, x.height = int(screen.WidthInPixels), int(screen.HeightInPixels)
	return nil
}

// checkPeer makes sure nc's other end is the X server the executor
// started: the socket's path is in /tmp, which the sandbox's programs may
// write, and one could put its own listener there (a fake server could
// feed the executor anything: xgb allocates what a reply's length says).
func (x *xserver) checkPeer(nc net.Conn) error {
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		return errors.New("the X server's socket is not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	cerr := raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if cerr != nil {
		return cerr
	}
	if err != nil {
		return fmt.Errorf("asking who listens at the X server's socket: %w", err)
	}
	if int(cred.Pid) != x.proc.Pid() {
		return fmt.Errorf("the X server's socket %s is held by another process (pid %d), not the X server (pid %d)",
			nc.RemoteAddr(), cred.Pid, x.proc.Pid())
	}
	return nil
}

// reconnect connects again to the running server after the connection
// was lost; the server must be the same size it was.
func (x *xserver) reconnect(number int) error {
	if isDone(x.proc.Done()) {
		return errors.New("the X server stopped")
	}
	w, h := x.width, x.height
	old := x.conn
	if err := x.connect(number); err != nil {
		return err
	}
	old.Close()
	if x.width != w || x.height != h {
		x.conn.Close()
		x.nc.Close()
		return fmt.Errorf("the X server is %dx%d now, not %dx%d", x.width, x.height, w, h)
	}
	x.lost = make(chan struct{})
	return nil
}

// cutOnDone cuts x's connection when the call has not ended cutGrace
// after ctx did (the returned stop ends the call): a call waiting on a
// reply the server does not send (a program grabbed the server) then
// ends, and the next call connects again. The grace lets a call that
// sees ctx end on its own first let go of the keys and buttons it holds.
func (x *xserver) cutOnDone(ctx context.Context) (stop func()) {
	nc := x.nc
	ended := make(chan struct{})
	stopCtx := context.AfterFunc(ctx, func() {
		t := time.NewTimer(cutGrace)
		defer t.Stop()
		select {
		case <-ended:
		case <-t.C:
			x.cut.Store(true)
			nc.Close()
		}
	})
	return func() {
		close(ended)
		stopCtx()
	}
}

// cutGrace is how long a call whose context ended may go on before its
// connection is cut.
const cutGrace = time.Second

// readEvents drains the connection's events (xgb stops reading replies
// when its event queue is full; the keymap is read again for every action,
// so MappingNotify needs no handling) and says when the connection ends.
func (d *Display) readEvents(x *xserver) {
	defer close(x.lost)
	for {
		ev, err := x.conn.WaitForEvent()
		if ev == nil && err == nil {
			return
		}
	}
}

// ensureWMLocked starts the window manager if there is one and it is not
// running. One that keeps dying is given up on after three starts.
func (d *Display) ensureWMLocked() {
	x := d.x
	if x.wm != nil && !isDone(x.wm.Done()) {
		return
	}
	argv := d.windowManager()
	if argv == nil {
		return
	}
	if x.wm != nil {
		why := process.Describe(x.wm.Status())
		if d.wmStarts >= 3 {
			return
		}
		d.notes = append(d.notes, fmt.Sprintf("the window manager (%s) had stopped (%s) and was started again", argv[0], why))
	}
	env := append(append([]string(nil), d.cfg.Env...), "DISPLAY=:"+strconv.Itoa(d.number))
	wm, err := process.StartChild(argv, env, nil)
	if err != nil {
		d.log.Warn("cannot start the window manager", "wm", argv[0], "err", err)
		d.wmStarts = 3
		return
	}
	d.wmStarts++
	x.wm = wm
}

func (d *Display) windowManager() []string {
	switch d.cfg.WindowManager {
	case "none":
		return nil
	case "":
		for _, wm := range DefaultWindowManagers {
			if inPath(wm[0], d.cfg.Env) {
				return wm
			}
		}
		return nil
	default:
		return strings.Fields(d.cfg.WindowManager)
	}
}

// Close stops the window manager and the X server; a call in progress is
// cut short.
func (d *Display) Close() error {
	select {
	case <-d.closing:
	default:
		close(d.closing)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	d.stopLocked()
	return nil
}

// stopLocked stops what runs: TERM, then KILL after a moment.
func (d *Display) stopLocked() {
	x := d.x
	if x == nil {
		return
	}
	d.x = nil
	d.server.Store(nil)
	if x.conn != nil {
		x.conn.Close()
	}
	for _, c := range []*process.Child{x.wm, x.proc} {
		if c == nil {
			continue
		}
		c.Signal(syscall.SIGTERM)
		select {
		case <-c.Done():
		case <-time.After(2 * time.Second):
			c.Signal(syscall.SIGKILL)
			<-c.Done()
		}
	}
}

func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// inPath reports whether name is an executable in env's PATH.
func inPath(name string, env []string) bool {
	path := process.DefaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for dir := range strings.SplitSeq(path, ":") {
		if fi, err := os.Stat(dir + "/" + name); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return true
		}
	}
	return false
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) readFrom(r io.ReadCloser) {
	defer r.Close()
	buf := make([]byte, 1024)
	for {
		n, err := r.Read(buf)
		t.mu.Lock()
		t.b = append(t.b, buf[:n]...)
		if len(t.b) > t.max {
			t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
		}
		t.mu.Unlock()
		if err != nil {
			return
		}
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
