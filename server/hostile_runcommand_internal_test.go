package server

import (
	"context"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
)

// repeatingExecutor is a modified executor that says "started" many
// times for one command; it counts the stdin writes it is sent.
type repeatingExecutor struct {
	Executor
	starts int
	writes atomic.Int64
}

func (e *repeatingExecutor) Exec(ctx context.Context, req *executorv1.ExecRequest, on func(*executorv1.ExecEvent)) (*executorv1.Exited, error) {
	for range e.starts {
		on(&executorv1.ExecEvent{Event: &executorv1.ExecEvent_Started{Started: &executorv1.Started{Pid: 7}}})
	}
	return &executorv1.Exited{}, nil
}

func (e *repeatingExecutor) WriteStdin(ctx context.Context, pid int32, data []byte, closeStdin bool) error {
	e.writes.Add(1)
	return nil
}

type oneExecutor struct {
	Sandboxes
	ex Executor
}

func (o oneExecutor) Executor(ctx context.Context, tenant, id string) (Executor, error) {
	return o.ex, nil
}
func (o oneExecutor) OOMKills(ctx context.Context, tenant, id string) (int, int64, error) {
	return 0, 0, nil
}

// A command's stdin is written once, however often a modified executor
// says the command started: each repeat must not start another writer
// (a goroutine per message, and the stdin sent again and again).
func TestHostileRunCommandRepeatedStart(t *testing.T) {
	ex := &repeatingExecutor{starts: 1000}
	s := &Server{m: oneExecutor{ex: ex}}
	_, err := s.RunCommand(context.Background(), connect.NewRequest(&reinsv1.RunCommandRequest{
		SandboxId: "sb1", Command: "cat", Stdin: []byte("hello"),
	}))
	if err != nil {
		t.Fatal(err)
	}
	if n := ex.writes.Load(); n != 1 {
		t.Fatalf("the stdin was written %d times for one command", n)
	}
}
