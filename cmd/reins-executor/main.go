// Command reins-executor runs inside every sandbox, as its init (PID 1), and
// serves the reins.executor.v1 API on a unix socket: processes, files, tar
// streams and usage. See package executor.
//
//	REINS_EXECUTOR_TOKEN=… reins-executor --listen /.reins/run/executor.sock --root / --workdir /workspace --make-workdir
//
// The token comes from REINS_EXECUTOR_TOKEN (removed from the environment
// the processes get; reins sets it in the init's spec) or from --token-file
// (read, then deleted).
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/executor"
	"github.com/reinsdev/reins/executor/computer"
)

const tokenEnv = "REINS_EXECUTOR_TOKEN"

func main() {
	// The executor mostly waits. Under gVisor every syscall and every
	// thread wake-up is expensive, and memory is committed in large units:
	// one P means fewer threads, fewer wake-ups (measured: ~8% fewer
	// syscalls per exec) and a smaller RSS. A GC that keeps the heap small
	// keeps the idle RSS small. (No memory limit: many chatty processes
	// legitimately hold their output buffers, and a limit would make the GC
	// run without end.)
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(50)
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "reins-executor:", err)
		os.Exit(1)
	}
}

func run() error {
	listen := flag.String("listen", "", "unix socket to serve on (required; a stale socket is replaced)")
	root := flag.String("root", "", "directory file calls are confined to (required; \"/\" inside a sandbox)")
	workdir := flag.String("workdir", "/", "where relative paths and processes start, inside the sandbox")
	logFile := flag.String("log-file", "", "once listening, send this process's own output here (a file inside the sandbox) instead of the stdout and stderr it was started with")
	makeWorkdir := flag.Bool("make-workdir", false, "create --workdir (and its parents) if it is missing")
	tokenFile := flag.String("token-file", "", "file holding the token calls must present; deleted once read (or set "+tokenEnv+")")
	staging := flag.String("staging-dir", "", "directory (inside the sandbox, on the root filesystem's mount) for files the host reads or writes directly (Stage, Place); emptied at start")
	caCert := flag.String("ca-cert", "", "a CA certificate (PEM) to add to the sandbox's trust store and name in SSL_CERT_FILE, NODE_EXTRA_CA_CERTS, REQUESTS_CA_BUNDLE and the like")
	display := flag.String("display", "", "WIDTHxHEIGHT: give the sandbox a display of that size (an X server, Xvfb, started on the first computer call or process; DISPLAY=:0 for every process); each side "+fmt.Sprint(computer.MinSide)+".."+fmt.Sprint(computer.MaxSide))
	gw := flag.Bool("gateway", false, "listen for the model gateway on "+executor.GatewayAddr+" (the sandbox's loopback) from the start, before any process runs")
	version := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *version {
		fmt.Println(executor.Version)
		return nil
	}
	if *listen == "" || *root == "" {
		flag.Usage()
		return fmt.Errorf("--listen and --root are required")
	}
	var displayCfg computer.Config
	if *display != "" {
		w, h, err := computer.ParseSize(*display)
		if err != nil {
			return fmt.Errorf("--display: %w", err)
		}
		displayCfg = computer.Config{Width: w, Height: h}
	}
	token, err := readToken(*tokenFile)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// Listen first: the service's first call waits in the socket's
	// backlog while the rest starts, instead of polling for the socket
	// (this is on every create's path).
	l, err := executor.ListenHost(*listen)
	if err != nil {
		return err
	}
	if *makeWorkdir {
		// Made here, inside the sandbox, where its symlinks resolve as
		// the sandbox sees them: the host never walks this path.
		// A workdir the sandbox itself broke (a dangling symlink, a
		// file) must not keep its executor from starting: start in "/".
		if err := os.MkdirAll(*workdir, 0o755); err != nil {
			log.Warn("cannot make the workdir; starting in /", "workdir", *workdir, "err", err)
			*workdir = "/"
		}
		// So is TMPDIR (the service sets /var/tmp) if the image lacks
		// it, made as /tmp is: anyone may write, only owners remove.
		if d := os.Getenv("TMPDIR"); d != "" {
			if err := executor.MakeTmpdir(d); err != nil {
				log.Warn("cannot make TMPDIR", "dir", d, "err", err)
			}
		}
	}

	if *caCert != "" {
		// Before the base environment is taken: the processes get it.
		if bundle, err := trustCA(*caCert); err != nil {
			log.Warn("cannot trust the sandbox's CA; TLS to hosts whose secrets the proxy adds will fail", "err", err)
		} else {
			log.Debug("trusting the sandbox's CA", "bundle", bundle)
		}
	}

	// Orphans of the processes we start are ours to reap, also when we are
	// not PID 1 (outside a sandbox), rather than the host's init's.
	if os.Getpid() != 1 {
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}
	srv, err := executor.New(executor.Config{
		Root:       *root,
		Workdir:    *workdir,
		Token:      token,
		BaseEnv:    os.Environ(), // the token is already out of it
		StagingDir: *staging,
		Gateway:    *gw,
		Display:    displayCfg,
		Logger:     log,
	})
	if err != nil {
		l.Close()
		return err
	}
	if *logFile != "" {
		if err := redirectOutput(*logFile); err != nil {
			log.Warn("keeping the startup output", "log_file", *logFile, "err", err)
		}
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, executor.ListenAgainSignal)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	log.Debug("serving", "socket", *listen, "root", *root, "version", executor.Version)
	for {
		select {
		case sig := <-sigs:
			if sig == executor.ListenAgainSignal {
				// After a checkpoint (executor.HostListener).
				if err := srv.Relisten(); err != nil {
					log.Warn("cannot listen again", "err", err)
				}
				continue
			}
			log.Info("stopping: killing every process group", "signal", sig.String())
			srv.Close()
			return nil
		case err := <-errc:
			srv.Close()
			return err
		}
	}
}

// readToken reads the token from file (then deletes it) or from the
// environment (then removes it from there).
func readToken(file string) (string, error) {
	envToken, fromEnv := os.LookupEnv(tokenEnv)
	os.Unsetenv(tokenEnv)
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("reading the token: %w", err)
		}
		if err := os.Remove(file); err != nil {
			return "", fmt.Errorf("deleting the token file %s after reading it (code in the sandbox must not read it): %w", file, err)
		}
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, nil
		}
		return "", fmt.Errorf("the token file %s is empty", file)
	}
	if fromEnv && strings.TrimSpace(envToken) != "" {
		return strings.TrimSpace(envToken), nil
	}
	return "", fmt.Errorf("no token: pass --token-file or set %s", tokenEnv)
}

// redirectOutput points stdout and stderr at file, appending. The output
// the executor was started with is a file the host keeps (its startup
// errors, for the service to quote); a process in the sandbox could reopen
// it through /proc/1/fd and write to the host's disk without limit. From
// here on, what the executor says goes to a file in the sandbox, on the
// sandbox's own disk and within its limit.
func redirectOutput(file string) error {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_APPEND|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, fd := range []int{1, 2} {
		if err := unix.Dup3(int(f.Fd()), fd, 0); err != nil {
			return err
		}
	}
	return nil
}
