package server

import (
	"context"
	"io"
	"net/http"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/sandbox"
)

// Sandboxes is what the API needs of the sandbox service: sandboxes by
// tenant, and a way to reach each one's executor. sandbox/manager's Manager
// is one (through Over); a service that runs its sandboxes elsewhere (a
// cluster, another host) is another, and the API does not change.
type Sandboxes interface {
	Lifecycle
	// Executor reaches a running sandbox's executor (and marks the
	// sandbox active, for its idle timeout).
	Executor(ctx context.Context, tenant, id string) (Executor, error)
}

// Lifecycle makes, shows and ends sandboxes. tenant "" is the admin, who
// sees every sandbox; a tenant sees its own and gets errdefs.ErrNotFound
// for any other.
type Lifecycle interface {
	// Create makes and starts a sandbox, reporting slow steps to progress.
	Create(ctx context.Context, tenant string, spec sandbox.Spec, progress func(sandbox.Progress)) (sandbox.Info, error)
	Get(ctx context.Context, tenant, id string) (sandbox.Info, error)
	List(ctx context.Context, tenant string, labels map[string]string) []sandbox.Info
	Delete(ctx context.Context, tenant, id string) error
	// Ended reports whether a sandbox whose call broke has stopped, waiting
	// a moment for a death on its way to be recorded.
	Ended(ctx context.Context, tenant, id string) (sandbox.Info, bool)
	// OOMKills is how many processes the memory limit has killed so far,
	// read now, and the limit.
	OOMKills(ctx context.Context, tenant, id string) (int, int64, error)
	Backends() []sandbox.BackendInfo
}

// Executor is what the API needs of one sandbox's executor: the calls it
// serves itself (Exec and Attach relayed event by event; Download from the
// staged file when it can, relayed otherwise), and for every other call,
// passed through as bytes, the transport and the token that reach it.
type Executor interface {
	Exec(ctx context.Context, req *executorv1.ExecRequest, onEvent func(*executorv1.ExecEvent)) (*executorv1.Exited, error)
	Attach(ctx context.Context, pid int32, follow bool, onEvent func(*executorv1.ExecEvent)) (*executorv1.Exited, error)
	// StagedDownload opens a single file through the host's view of the
	// sandbox's root (ok false: it cannot be, use Download); Download
	// writes the executor's tar stream of path to w and returns its sha256.
	StagedDownload(ctx context.Context, path string) (r io.ReadCloser, ok bool, err error)
	Download(ctx context.Context, path string, w io.Writer) (string, error)
	// WriteStdin writes to a process's stdin (RunCommand's stdin).
	WriteStdin(ctx context.Context, pid int32, data []byte, closeStdin bool) error
	// OpenFile and WriteFileFrom move one file's raw bytes (the raw file
	// routes, rawfile.go): staged through the host's view of the
	// sandbox's root when they can be, streamed over the socket if not.
	OpenFile(ctx context.Context, path string) (io.ReadCloser, *executorv1.FileInfo, error)
	WriteFileFrom(ctx context.Context, path string, mode uint32, r io.Reader) (int64, error)
	Token() string
	Transport(procedure string) http.RoundTripper
}

// ClientSandboxes is a sandbox service whose Client returns its own
// executor client type E; Over adapts it to Sandboxes.
type ClientSandboxes[E Executor] interface {
	Lifecycle
	Client(ctx context.Context, tenant, id string) (E, error)
}

// Over serves s through the API: server.New(server.Over(m), …) for a
// *manager.Manager, whose Client returns *client.Client.
func Over[E Executor](s ClientSandboxes[E]) Sandboxes { return over[E]{s} }

type over[E Executor] struct{ ClientSandboxes[E] }

// quietClients is the optional part of ClientSandboxes whose lookups do
// not count as the sandbox's activity (Manager.QuietClient).
type quietClients[E Executor] interface {
	QuietClient(ctx context.Context, tenant, id string) (E, error)
}

// QuietExecutor is Executor for calls that only look at a sandbox (the
// executor's Usage, Hello, Health): they do not hold off its idle timeout.
func (o over[E]) QuietExecutor(ctx context.Context, tenant, id string) (Executor, error) {
	q, ok := o.ClientSandboxes.(quietClients[E])
	if !ok {
		return o.Executor(ctx, tenant, id)
	}
	ex, err := q.QuietClient(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	return ex, nil
}

func (o over[E]) Executor(ctx context.Context, tenant, id string) (Executor, error) {
	ex, err := o.Client(ctx, tenant, id)
	if err != nil {
		return nil, err // never a typed nil in the interface
	}
	return ex, nil
}
