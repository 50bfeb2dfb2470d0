package e2b

import (
	"io/fs"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/reinsdev/reins/api/e2b/envd/filesystem"
	"github.com/reinsdev/reins/api/e2b/envd/process"
)

// sh runs a command in the sandbox through the data plane and fails the
// test unless it exits 0.
func (e *envd) sh(cmd string) string {
	e.t.Helper()
	r := e.start(ctxT(e.t), connect.NewRequest(&process.StartRequest{Process: bash(cmd), Stdin: proto.Bool(false)}))
	if r.end.GetExitCode() != 0 {
		e.t.Fatalf("%s: %+v", cmd, r)
	}
	return r.stdout
}

func TestFilesystem(t *testing.T) {
	e := newEnvd(t)
	ctx := ctxT(t)
	e.sh("mkdir -p /home/user/d/sub && printf hello > /home/user/d/a.txt && chmod 640 /home/user/d/a.txt && ln -s a.txt /home/user/d/link && echo x > /home/user/d/sub/b")

	t.Run("Stat", func(t *testing.T) {
		// A relative path is under user's home, as envd has it.
		resp, err := e.fs.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: "d/a.txt"}))
		if err != nil {
			t.Fatal(err)
		}
		en := resp.Msg.Entry
		if en.Name != "a.txt" || en.Path != "/home/user/d/a.txt" || en.Type != filesystem.FileType_FILE_TYPE_FILE || en.Size != 5 ||
			en.Mode != 0o640 || en.Permissions != "-rw-r-----" || en.Owner != "user" || en.Group != "user" ||
			time.Since(en.ModifiedTime.AsTime()) > time.Hour {
			t.Errorf("Stat = %v", en)
		}
		resp, err = e.fs.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: "/home/user/d/link"}))
		if err != nil {
			t.Fatal(err)
		}
		if en := resp.Msg.Entry; en.Type != filesystem.FileType_FILE_TYPE_SYMLINK || en.GetSymlinkTarget() != "a.txt" || en.Permissions[0] != 'L' {
			t.Errorf("Stat of a symlink = %v", en)
		}
		resp, err = e.fs.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: "/home/user/d"}))
		if err != nil || fs.FileMode(resp.Msg.Entry.Mode)&fs.ModeDir == 0 || resp.Msg.Entry.Type != filesystem.FileType_FILE_TYPE_DIRECTORY {
			t.Errorf("Stat of a directory = %v, %v", resp, err)
		}
		_, err = e.fs.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: "/nope"}))
		wantCode(t, err, connect.CodeNotFound, "/nope")
	})

	t.Run("ListDir", func(t *testing.T) {
		names := func(depth uint32) []string {
			resp, err := e.fs.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: "/home/user/d", Depth: depth}))
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, en := range resp.Msg.Entries {
				out = append(out, en.Path)
			}
			return out
		}
		if got := names(1); !slices.Equal(got, []string{"/home/user/d/a.txt", "/home/user/d/link", "/home/user/d/sub"}) {
			t.Errorf("depth 1 = %v", got)
		}
		if got := names(2); !slices.Equal(got, []string{"/home/user/d/a.txt", "/home/user/d/link", "/home/user/d/sub", "/home/user/d/sub/b"}) {
			t.Errorf("depth 2 = %v", got)
		}
	})

	t.Run("MakeDir, Move, Remove", func(t *testing.T) {
		resp, err := e.fs.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: "/home/user/m/n"}))
		if err != nil || resp.Msg.Entry.Path != "/home/user/m/n" || resp.Msg.Entry.Type != filesystem.FileType_FILE_TYPE_DIRECTORY {
			t.Fatalf("MakeDir = %v, %v", resp, err)
		}
		_, err = e.fs.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: "/home/user/m/n"}))
		wantCode(t, err, connect.CodeAlreadyExists, "/home/user/m/n") // the SDK's makeDir says false

		mv, err := e.fs.Move(ctx, connect.NewRequest(&filesystem.MoveRequest{Source: "/home/user/m", Destination: "/home/user/m2"}))
		if err != nil || mv.Msg.Entry.Path != "/home/user/m2" {
			t.Fatalf("Move = %v, %v", mv, err)
		}
		if _, err := e.fs.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: "/home/user/m2/n"})); err != nil {
			t.Errorf("the moved tree: %v", err)
		}
		if _, err := e.fs.Remove(ctx, connect.NewRequest(&filesystem.RemoveRequest{Path: "/home/user/m2"})); err != nil {
			t.Fatal(err)
		}
		_, err = e.fs.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: "/home/user/m2"}))
		wantCode(t, err, connect.CodeNotFound, "m2")
	})

	t.Run("WatchDir", func(t *testing.T) {
		e.sh("mkdir -p /home/user/w/sub")
		stream, err := e.fs.WatchDir(ctx, connect.NewRequest(&filesystem.WatchDirRequest{Path: "/home/user/w", Recursive: true, IncludeEntry: true}))
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		if !stream.Receive() || stream.Msg().GetStart() == nil {
			t.Fatalf("WatchDir's first event = %v, want start (%v)", stream.Msg(), stream.Err())
		}
		var got []string
		next := func(n int) {
			for len(got) < n && stream.Receive() {
				if ev := stream.Msg().GetFilesystem(); ev != nil {
					got = append(got, ev.Type.String()+" "+ev.Name)
					if ev.Type == filesystem.EventType_EVENT_TYPE_CREATE && ev.GetEntry().GetPath() != "/home/user/w/sub/f" {
						t.Errorf("create's entry = %v", ev.GetEntry())
					}
				}
			}
		}
		// The file stays until its create and write are seen, so the
		// create's entry can be read.
		e.sh("printf 12345 > /home/user/w/sub/f")
		next(2)
		e.sh("rm /home/user/w/sub/f")
		next(3)
		want := []string{"EVENT_TYPE_CREATE sub/f", "EVENT_TYPE_WRITE sub/f", "EVENT_TYPE_REMOVE sub/f"}
		if !slices.Equal(got, want) {
			t.Errorf("events %v, want %v", got, want)
		}
	})

	t.Run("Watchers", func(t *testing.T) {
		e.sh("mkdir -p /home/user/pw")
		cw, err := e.fs.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "/home/user/pw"}))
		if err != nil {
			t.Fatal(err)
		}
		id := cw.Msg.WatcherId
		e.sh("touch /home/user/pw/a")
		var names []string
		for deadline := time.Now().Add(10 * time.Second); len(names) == 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			resp, err := e.fs.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: id}))
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range resp.Msg.Events {
				names = append(names, ev.Type.String()+" "+ev.Name)
			}
		}
		if len(names) == 0 || names[0] != "EVENT_TYPE_CREATE a" {
			t.Errorf("polled events %v, want a create of a first", names)
		}
		if _, err := e.fs.RemoveWatcher(ctx, connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: id})); err != nil {
			t.Fatal(err)
		}
		_, err = e.fs.GetWatcherEvents(ctx, connect.NewRequest(&filesystem.GetWatcherEventsRequest{WatcherId: id}))
		wantCode(t, err, connect.CodeNotFound, "not found")
	})
}
