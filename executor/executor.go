// Package executor is the server side of reins-executor, the program that
// runs as init (PID 1) inside every sandbox and does what the service asks:
// run processes (package process), read and write files (package files),
// move trees in and out as tar streams (package archive), and report usage.
//
// It serves the reins.executor.v1 Connect API over a unix socket. Every call
// must carry "Authorization: Bearer <token>"; the token is compared in
// constant time.
//
// A client that goes away does not stop anything: a foreground Exec whose
// client disconnects carries on as if it had been started in the background
// (its output stays in the ring buffers for Attach). Only Signal, a timeout
// or the executor's shutdown (Close) kill processes.
package executor

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/reinsdev/reins/api/reins/executor/v1/executorv1connect"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor/computer"
	"github.com/reinsdev/reins/executor/files"
	"github.com/reinsdev/reins/executor/process"
)

// Version is the executor's build version, set with
// -ldflags "-X github.com/reinsdev/reins/executor.Version=...".
var Version = "dev"

// APIVersion is the version of the reins.executor.v1 API served.
const APIVersion = 1

// Capabilities lists what every executor can do (HelloResponse.capabilities);
// one with a display adds "computer".
var Capabilities = []string{"exec", "stdin", "pty", "background", "attach", "idempotency", "signal",
	"files", "edit", "glob", "grep", "tar", "usage", "stage", "port", "gateway", "sync", "defaults", "watch"}

// Config is the executor's configuration. Root and Token are required: there
// is no default that would be safe.
type Config struct {
	// Root is the directory file calls are confined to: "/" inside a
	// sandbox (the sandbox is the confinement), any other directory on a
	// host or in tests (confined with os.Root).
	Root string
	// Workdir is where relative paths and processes start, inside the
	// sandbox; default "/".
	Workdir string
	// Token is the secret every call must present as a bearer token.
	Token string
	// BaseEnv is the environment of every process (K=V), to which each Exec
	// adds its own. A PATH is added when it has none.
	BaseEnv []string
	// StagingDir, a directory inside the sandbox on the root
	// filesystem's mount (StagingDir), enables Stage and Place; the
	// executor empties it at start. "" disables them.
	StagingDir string
	// Gateway starts the model gateway's listener (ListenGateway) in New,
	// before any process of the sandbox runs; GatewayAddr is where
	// (default GatewayAddr; tests use another port).
	Gateway     bool
	GatewayAddr string
	// Display, with a Width, gives the sandbox a display of that size
	// (package computer): its X server starts on the first computer call
	// or the first process, and DISPLAY is in every process's environment.
	// Its Env and Logger default to BaseEnv and Logger. A zero Width: no
	// display.
	Display computer.Config

	// RingBytes is the output kept per stream of each process (default 1 MiB).
	RingBytes int
	// MaxExited is how many exited processes are remembered (default 256).
	MaxExited int
	// MaxRetainedBytes bounds the output kept for exited processes (default 64 MiB).
	MaxRetainedBytes int
	// MaxKeys is how many idempotency keys are remembered (default 16384).
	MaxKeys int

	Logger *slog.Logger
}

// Server implements the executor API.
type Server struct {
	cfg     Config
	fs      *files.FS
	procs   *process.Table
	log     *slog.Logger
	token   atomic.Pointer[[sha256.Size]byte] // changed by a rekey (checkpoint.go)
	env     atomic.Pointer[[]string]          // the base environment (SetDefaults replaces it)
	started time.Time
	// activity is when anything last happened (process.MonoNow).
	activity atomic.Int64
	http     atomic.Pointer[http.Server]
	closed   atomic.Bool
	memory   settler
	ports    ports
	gateway  gatewayListener
	display  *computer.Display // nil: no display
	// displayFailed: an exec could not start the display (startDisplay).
	displayFailed atomic.Bool
	// host is the listener Serve was given when it can be let go of
	// for a checkpoint (HostListener).
	host atomic.Pointer[HostListener]
	// watches counts the Watch calls running (watch.go).
	watches watchCount
}

var _ executorv1connect.ExecutorHandler = (*Server)(nil)

// New returns a Server for cfg. Close it to kill its processes.
func New(cfg Config) (*Server, error) {
	if cfg.Root == "" {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument,
			"executor: Root is required (\"/\" inside a sandbox; a directory to confine file calls to elsewhere)")
	}
	if cfg.Token == "" {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "executor: Token is required: every call must be authenticated")
	}
	fsys, err := files.New(cfg.Root, cfg.Workdir)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, fs: fsys, log: cfg.Logger, started: time.Now()}
	s.setToken(cfg.Token)
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Display.Width != 0 {
		dc := cfg.Display
		if dc.Env == nil {
			dc.Env = cfg.BaseEnv
		}
		if dc.Logger == nil {
			dc.Logger = s.log
		}
		if s.display, err = computer.New(dc); err != nil {
			fsys.Close()
			return nil, err
		}
	}
	s.setEnv(cfg.BaseEnv)
	s.procs, err = process.NewTable(process.Options{
		RingBytes:        cfg.RingBytes,
		MaxExited:        cfg.MaxExited,
		MaxRetainedBytes: cfg.MaxRetainedBytes,
		MaxKeys:          cfg.MaxKeys,
		OnActivity:       s.touch,
	})
	if err != nil {
		fsys.Close()
		return nil, err
	}
	s.prepareStaging()
	if cfg.Gateway {
		if err := s.ListenGateway(); err != nil {
			s.procs.Close()
			fsys.Close()
			return nil, err
		}
	}
	s.touch()
	return s, nil
}

func (s *Server) touch() { s.activity.Store(int64(process.MonoNow())) }

// Handler returns the HTTP handler serving the API, with authentication.
func (s *Server) Handler() http.Handler {
	// Handlers return plain errors with their kinds; errs turns them into
	// Connect errors, once, for every call.
	errs := &errdefs.Interceptor{}
	opts := []connect.HandlerOption{
		connect.WithReadMaxBytes(2 * files.MaxRead), // room to refuse a too large WriteFile in words
		// Local socket: compression would only burn the sandbox's CPU.
		connect.WithCompression("gzip", nil, nil),
		connect.WithCodec(codec{}),
		connect.WithInterceptors(errs),
	}
	_, h := executorv1connect.NewExecutorHandler(s, opts...)
	errw := connect.NewErrorWriter(opts...)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Monitoring calls are not activity: the service's idle check asks
		// Usage, and that must not keep an idle sandbox alive.
		// A gateway request is not activity by itself: the service keeps
		// accepts waiting in every sandbox with a gateway; a handover is.
		// A checkpoint call is no activity either.
		port, gw := strings.HasPrefix(r.URL.Path, PortPath), strings.HasPrefix(r.URL.Path, gatewayPrefix)
		ckpt := strings.HasPrefix(r.URL.Path, checkpointPrefix)
		if port || gw || ckpt {
			if port {
				s.touch()
			}
			switch {
			case !s.authorized(r.Header.Get("Authorization")):
				portError(w, http.StatusUnauthorized, "missing or wrong executor token")
			case port:
				s.servePort(w, r)
			case gw:
				s.serveGateway(w, r)
			default:
				s.serveCheckpoint(w, r)
			}
			return
		}
		switch r.URL.Path {
		case executorv1connect.ExecutorUsageProcedure, executorv1connect.ExecutorHealthProcedure, executorv1connect.ExecutorHelloProcedure,
			executorv1connect.ExecutorSyncProcedure:
		default:
			s.touch()
		}
		if !s.authorized(r.Header.Get("Authorization")) {
			errw.Write(w, r, errs.Error(r.Context(), r.URL.Path, errdefs.WithMessage(errdefs.ErrUnauthenticated,
				"missing or wrong executor token: send \"Authorization: Bearer <token>\" with the token the sandbox was created with")))
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) authorized(header string) bool {
	tok, ok := strings.CutPrefix(header, "Bearer ")
	if !ok {
		return false
	}
	// Hashing first makes the comparison constant-time in the length too.
	sum := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(sum[:], s.token.Load()[:]) == 1
}

// HTTPServer returns an http.Server for the API speaking HTTP/1.1 and
// unencrypted HTTP/2 (h2c), with flow-control windows large enough for file
// transfers at disk speed.
func (s *Server) HTTPServer() *http.Server {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:   s.Handler(),
		Protocols: &protocols,
		HTTP2: &http.HTTP2Config{
			MaxReceiveBufferPerConnection: 8 << 20,
			MaxReceiveBufferPerStream:     4 << 20,
			MaxReadFrameSize:              1 << 20,
		},
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
}

// Serve serves the API on l until Close.
func (s *Server) Serve(l net.Listener) error {
	hs := s.HTTPServer()
	if !s.http.CompareAndSwap(nil, hs) {
		return errors.New("executor: Serve called twice")
	}
	if h, ok := l.(*HostListener); ok {
		s.host.Store(h)
	}
	// A Close that came first found no server to stop: stop here. (Close
	// sets closed before it looks for the server, so one of the two sees
	// the other.)
	if s.closed.Load() {
		l.Close()
		return nil
	}
	err := hs.Serve(bufferedListener{l})
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close kills the process group of every process still running, stops
// serving and releases the server.
func (s *Server) Close() error {
	s.closed.Store(true)
	s.memory.stop()
	s.gateway.close()
	s.ports.close()
	if s.display != nil {
		s.display.Close()
	}
	s.procs.Close()
	if hs := s.http.Load(); hs != nil {
		hs.Close()
	}
	return s.fs.Close()
}

// Listen listens on the unix socket path, replacing a stale socket left by
// an earlier run. Paths longer than the 108 bytes a socket address holds are
// reached through the directory's descriptor. The socket is made 0600.
func Listen(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, errdefs.WithMessage(errdefs.ErrAlreadyExists,
				fmt.Sprintf("%s exists and is not a socket; refusing to replace it", path))
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing the stale socket %s: %w", path, err)
		}
	}
	addr := path
	var dir *os.File
	if len(path) >= 108 {
		var err error
		dir, err = os.Open(filepath.Dir(path))
		if err != nil {
			return nil, err
		}
		defer dir.Close()
		addr = fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(path))
	}
	l, err := net.Listen("unix", addr)
	if err != nil {
		return nil, err
	}
	if dir != nil {
		// The descriptor path dies with dir: unlink by the real path instead.
		l.(*net.UnixListener).SetUnlinkOnClose(false)
		l = &unlinkListener{Listener: l, path: path}
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

type unlinkListener struct {
	net.Listener
	path string
}

func (l *unlinkListener) Close() error {
	err := l.Listener.Close()
	os.Remove(l.path)
	return err
}

func hasKey(env []string, key string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			return true
		}
	}
	return false
}

// isNoSpace reports a full disk or an exhausted quota.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, errdefs.ErrNoSpace)
}

// bufferedListener gives each connection a read buffer. HTTP/2 reads every
// frame's header and payload with a read each, and a call is several frames:
// with the buffer one read brings them all. Syscalls are what gVisor makes
// expensive; large reads still go straight into the reader's buffer.
type bufferedListener struct{ net.Listener }

// sendBuffer is the socket send buffer asked for (capped by the kernel's
// net.core.wmem_max, or gVisor's own limit).
const sendBuffer = 4 << 20

func (l bufferedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if uc, ok := c.(*net.UnixConn); ok {
		// A deeper send buffer: downloads leave in fewer, larger writes.
		uc.SetWriteBuffer(sendBuffer)
	}
	return &bufferedConn{Conn: c, r: bufio.NewReaderSize(c, 32<<10)}, nil
}

type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
