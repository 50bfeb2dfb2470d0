package e2b

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/reinsdev/reins/api/e2b/envd/process"
)

// run is what a process stream carried.
type run struct {
	pid        uint32
	stdout     string
	stderr     string
	pty        string
	end        *process.ProcessEvent_EndEvent
	keepalives int
}

// collect reads a Start or Connect stream to its end.
func collect(t *testing.T, receive func() bool, msg func() *process.ProcessEvent, errf func() error) run {
	t.Helper()
	var r run
	for receive() {
		switch e := msg().Event.(type) {
		case *process.ProcessEvent_Start:
			r.pid = e.Start.Pid
		case *process.ProcessEvent_Data:
			r.stdout += string(e.Data.GetStdout())
			r.stderr += string(e.Data.GetStderr())
			r.pty += string(e.Data.GetPty())
		case *process.ProcessEvent_End:
			r.end = e.End
		case *process.ProcessEvent_Keepalive:
			r.keepalives++
		}
	}
	if err := errf(); err != nil {
		t.Fatalf("process stream: %v", err)
	}
	return r
}

func bash(cmd string) *process.ProcessConfig {
	return &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", cmd}}
}

// start runs req and collects its stream.
func (e *envd) start(ctx context.Context, req *connect.Request[process.StartRequest]) run {
	e.t.Helper()
	stream, err := e.proc.Start(ctx, req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer stream.Close()
	return collect(e.t, stream.Receive, func() *process.ProcessEvent { return stream.Msg().Event }, stream.Err)
}

// startBackground starts req and returns its pid once started; the
// stream is left open (a background command of the SDK).
func (e *envd) startBackground(ctx context.Context, req *process.StartRequest) uint32 {
	e.t.Helper()
	stream, err := e.proc.Start(ctx, connect.NewRequest(req))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { stream.Close() })
	if !stream.Receive() {
		e.t.Fatalf("no start event: %v", stream.Err())
	}
	st := stream.Msg().Event.GetStart()
	if st == nil || st.Pid == 0 {
		e.t.Fatalf("first event %v, want start with a pid", stream.Msg().Event)
	}
	return st.Pid
}

func TestProcess(t *testing.T) {
	e := newEnvd(t)
	ctx := ctxT(t)

	t.Run("Start", func(t *testing.T) {
		// As the SDK sends commands.run: bash -l -c, user "user" by
		// default, with envs; cwd defaults to user's home.
		req := connect.NewRequest(&process.StartRequest{Process: bash(`echo "out $A $HOME $USER $(pwd)"; echo err >&2; exit 3`), Stdin: proto.Bool(false)})
		req.Msg.Process.Envs = map[string]string{"A": "x"}
		r := e.start(ctx, req)
		if r.pid == 0 || r.stdout != "out x /home/user user /home/user\n" || r.stderr != "err\n" {
			t.Errorf("Start = %+v", r)
		}
		if r.end == nil || r.end.ExitCode != 3 || !r.end.Exited || r.end.Status != "exit status 3" {
			t.Errorf("end = %v, want exit 3", r.end)
		}
	})

	t.Run("Cwd and root", func(t *testing.T) {
		req := connect.NewRequest(&process.StartRequest{Process: bash(`echo "$HOME $(pwd)"`), Stdin: proto.Bool(false)})
		req.Msg.Process.Cwd = proto.String("/tmp")
		req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("root:")))
		if r := e.start(ctx, req); r.stdout != "/root /tmp\n" || r.end.GetExitCode() != 0 {
			t.Errorf("as root in /tmp: %+v", r)
		}
	})

	t.Run("Keepalive", func(t *testing.T) {
		req := connect.NewRequest(&process.StartRequest{Process: bash("sleep 2.5"), Stdin: proto.Bool(false)})
		req.Header().Set("Keepalive-Ping-Interval", "1")
		if r := e.start(ctx, req); r.keepalives < 1 || r.end == nil {
			t.Errorf("a 2.5 s command with 1 s keepalives sent %d keepalives (end %v)", r.keepalives, r.end)
		}
	})

	t.Run("Stdin", func(t *testing.T) {
		stream, err := e.proc.Start(ctx, connect.NewRequest(&process.StartRequest{Process: bash("cat; echo done"), Stdin: proto.Bool(true)}))
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		if !stream.Receive() || stream.Msg().Event.GetStart() == nil {
			t.Fatalf("no start: %v", stream.Err())
		}
		pid := stream.Msg().Event.GetStart().Pid
		sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}
		if _, err := e.proc.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{Process: sel,
			Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte("one ")}}})); err != nil {
			t.Fatal(err)
		}
		in := e.proc.StreamInput(ctx)
		in.Send(&process.StreamInputRequest{Event: &process.StreamInputRequest_Start{Start: &process.StreamInputRequest_StartEvent{Process: sel}}})
		in.Send(&process.StreamInputRequest{Event: &process.StreamInputRequest_Data{Data: &process.StreamInputRequest_DataEvent{
			Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte("two\n")}}}}})
		if _, err := in.CloseAndReceive(); err != nil {
			t.Fatal(err)
		}
		if _, err := e.proc.CloseStdin(ctx, connect.NewRequest(&process.CloseStdinRequest{Process: sel})); err != nil {
			t.Fatal(err)
		}
		r := collect(t, stream.Receive, func() *process.ProcessEvent { return stream.Msg().Event }, stream.Err)
		if r.stdout != "one two\ndone\n" || r.end.GetExitCode() != 0 {
			t.Errorf("cat of the input = %+v", r)
		}
	})

	t.Run("PTY", func(t *testing.T) {
		stream, err := e.proc.Start(ctx, connect.NewRequest(&process.StartRequest{
			Process: bash("read line; stty size; echo got $line"),
			Pty:     &process.PTY{Size: &process.PTY_Size{Rows: 24, Cols: 80}},
		}))
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		if !stream.Receive() || stream.Msg().Event.GetStart() == nil {
			t.Fatalf("no start: %v", stream.Err())
		}
		sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: stream.Msg().Event.GetStart().Pid}}
		if _, err := e.proc.Update(ctx, connect.NewRequest(&process.UpdateRequest{Process: sel,
			Pty: &process.PTY{Size: &process.PTY_Size{Rows: 30, Cols: 100}}})); err != nil {
			t.Fatal(err)
		}
		if _, err := e.proc.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{Process: sel,
			Input: &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: []byte("hi\n")}}})); err != nil {
			t.Fatal(err)
		}
		r := collect(t, stream.Receive, func() *process.ProcessEvent { return stream.Msg().Event }, stream.Err)
		if !strings.Contains(r.pty, "30 100") || !strings.Contains(r.pty, "got hi") || r.stdout != "" {
			t.Errorf("PTY output %q (stdout %q), want the resized size and the input", r.pty, r.stdout)
		}
	})

	t.Run("Background, List, Connect, SendSignal", func(t *testing.T) {
		req := &process.StartRequest{Process: bash("echo started; sleep 600"), Tag: proto.String("bg"), Stdin: proto.Bool(false)}
		req.Process.Envs = map[string]string{"K": "v"}
		pid := e.startBackground(ctx, req)

		list, err := e.proc.List(ctx, connect.NewRequest(&process.ListRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		var found *process.ProcessInfo
		for _, p := range list.Msg.Processes {
			if p.Pid == pid {
				found = p
			}
		}
		if found == nil || found.GetTag() != "bg" || found.Config.Cmd != "/bin/bash" || found.Config.Envs["K"] != "v" ||
			found.Config.GetCwd() != "/home/user" || len(found.Config.Args) != 3 {
			t.Fatalf("List = %v, want pid %d tagged bg with its config", list.Msg.Processes, pid)
		}

		// Connect by tag replays the output and follows to the end,
		// which SIGKILL brings.
		cs, err := e.proc.Connect(ctx, connect.NewRequest(&process.ConnectRequest{Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: "bg"}}}))
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		if !cs.Receive() || cs.Msg().Event.GetStart().GetPid() != pid {
			t.Fatalf("Connect's first event = %v, want start of %d (%v)", cs.Msg(), pid, cs.Err())
		}
		// The output before Connect is replayed (or comes live, if bash
		// has not got there yet).
		if !cs.Receive() || string(cs.Msg().Event.GetData().GetStdout()) != "started\n" {
			t.Fatalf("Connect's output = %v (%v), want started", cs.Msg(), cs.Err())
		}
		if _, err := e.proc.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{
			Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}, Signal: process.Signal_SIGNAL_SIGKILL})); err != nil {
			t.Fatal(err)
		}
		r := collect(t, cs.Receive, func() *process.ProcessEvent { return cs.Msg().Event }, cs.Err)
		if r.stdout != "" || r.end == nil || r.end.Exited || r.end.ExitCode != -1 || r.end.Status != "signal: killed" {
			t.Errorf("after SIGKILL: %+v end %v", r, r.end)
		}
	})

	t.Run("Errors", func(t *testing.T) {
		none := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: 999999}}
		_, err := e.proc.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{Process: none, Signal: process.Signal_SIGNAL_SIGTERM}))
		wantCode(t, err, connect.CodeNotFound, "999999")
		_, err = e.proc.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{Process: none}))
		wantCode(t, err, connect.CodeInvalidArgument, "SIGKILL")
		stream, err := e.proc.Start(ctx, connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{}}))
		if err == nil {
			for stream.Receive() {
			}
			err = stream.Err()
		}
		wantCode(t, err, connect.CodeInvalidArgument, "cmd")
		sreq := connect.NewRequest(&process.StartRequest{Process: bash("true")})
		sreq.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("nobody:")))
		stream3, err := e.proc.Start(ctx, sreq)
		if err == nil {
			for stream3.Receive() {
			}
			err = stream3.Err()
		}
		wantCode(t, err, connect.CodeUnauthenticated, "nobody")
	})
}

// wantCode fails unless err is a Connect error with code whose message
// says contains.
func wantCode(t *testing.T, err error, code connect.Code, contains string) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("got %v, want a Connect error %v", err, code)
	}
	if ce.Code() != code || !strings.Contains(ce.Message(), contains) {
		t.Errorf("got %v %q, want %v saying %q", ce.Code(), ce.Message(), code, contains)
	}
}
