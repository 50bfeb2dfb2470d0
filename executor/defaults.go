package executor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"connectrpc.com/connect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor/process"
)

// Bounds of SetDefaults' environment: above what the service gives a
// sandbox (its spec's 1024 variables and 256 KiB, with the image's and
// its own added), so that a caller cannot make every later process carry
// an environment that exhausts the sandbox's memory.
const (
	MaxDefaultEnv      = 2048
	MaxDefaultEnvBytes = 512 << 10
)

// SetDefaults replaces the base environment of later processes and, when
// asked, their working directory (made if missing), and forgets exited
// processes: the warm pool's hand-out (docs/decisions/0037-pool-hand-out.md).
func (s *Server) SetDefaults(ctx context.Context, req *connect.Request[executorv1.SetDefaultsRequest]) (*connect.Response[executorv1.SetDefaultsResponse], error) {
	env := req.Msg.Env
	if err := checkEnv(env); err != nil {
		return nil, err
	}
	if w := req.Msg.Workdir; w != "" {
		if err := s.fs.SetWorkdir(w); err != nil {
			return nil, err
		}
	}
	for _, kv := range env {
		// Only inside a sandbox: a confined root's TMPDIR is not a host path.
		if d, ok := strings.CutPrefix(kv, "TMPDIR="); ok && !s.fs.Confined() {
			if err := MakeTmpdir(d); err != nil {
				s.log.Warn("cannot make TMPDIR", "dir", d, "err", err)
			}
		}
	}
	if len(env) > 0 {
		s.setEnv(env)
	}
	if req.Msg.ForgetExited {
		s.procs.ForgetExited()
	}
	return connect.NewResponse(&executorv1.SetDefaultsResponse{}), nil
}

func checkEnv(env []string) error {
	n := 0
	for _, kv := range env {
		n += len(kv)
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.IndexByte(kv, 0) >= 0 {
			return errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf("env %.80q is not KEY=VALUE without NUL", kv))
		}
	}
	if len(env) > MaxDefaultEnv || n > MaxDefaultEnvBytes {
		return errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf(
			"an environment of %d variables and %d bytes: at most %d and %d", len(env), n, MaxDefaultEnv, MaxDefaultEnvBytes))
	}
	return nil
}

// setEnv makes env the base environment, with a PATH when it has none
// and, with a display, its DISPLAY.
func (s *Server) setEnv(env []string) {
	if !hasKey(env, "PATH") {
		env = append(env[:len(env):len(env)], "PATH="+process.DefaultPath)
	}
	if s.display != nil && !hasKey(env, "DISPLAY") {
		env = append(env[:len(env):len(env)], "DISPLAY="+s.display.Name())
	}
	s.env.Store(&env)
}

// MakeTmpdir makes the directory d when it is missing, as /tmp is made:
// anyone may write there, only owners remove. An existing d (whatever it
// is) is left alone.
func MakeTmpdir(d string) error {
	if !filepath.IsAbs(d) {
		return nil
	}
	if _, err := os.Lstat(d); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	return os.Chmod(d, 0o777|fs.ModeSticky)
}
