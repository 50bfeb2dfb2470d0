package sandboxtool_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor"
	"github.com/reinsdev/reins/executor/client"
	"github.com/reinsdev/reins/executor/computer"
	"github.com/reinsdev/reins/store/blob"
	"github.com/reinsdev/reins/tool"
	"github.com/reinsdev/reins/tool/sandboxtool"
)

// These tests run each tool against a real executor, in-process on a unix
// socket and confined to a temp dir (the "sandbox" is a directory), with
// the real client and a real blob store. Commands run on this host.
func TestMain(m *testing.M) {
	// The executor reaps orphans like an init does.
	unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait"))
}

type box struct {
	t     *testing.T
	root  string
	srv   *executor.Server
	cl    *client.Client
	blobs *blob.Store
	done  chan error
}

func newBox(t *testing.T) *box { return newBoxWith(t, computer.Config{}) }

// newBoxWith is a box whose executor has display (none with a zero Width).
func newBoxWith(t *testing.T, display computer.Config) *box {
	t.Helper()
	b := &box{t: t, root: t.TempDir(), done: make(chan error, 1)}
	var err error
	if b.srv, err = executor.New(executor.Config{Root: b.root, Token: "tok",
		BaseEnv: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LC_ALL=C"}, Display: display}); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "x.sock")
	l, err := executor.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() { b.done <- b.srv.Serve(l) }()
	if b.cl, err = client.Dial(context.Background(), sock, "tok", client.WithCallTimeout(60*time.Second)); err != nil {
		t.Fatal(err)
	}
	if b.blobs, err = blob.Open(filepath.Join(t.TempDir(), "blobs")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.stop)
	return b
}

func (b *box) stop() {
	if b.srv == nil {
		return
	}
	b.cl.Close()
	b.srv.Close()
	<-b.done
	b.srv = nil
}

func (b *box) sandbox(key string) sandboxtool.Sandbox {
	return sandboxtool.Sandbox{Exec: b.cl, Key: key, Name: "main", Blobs: b.blobs}
}

func find(t *testing.T, name string) sandboxtool.Tool {
	t.Helper()
	for _, tl := range sandboxtool.Tools() {
		if tl.Spec().Name == name {
			return tl
		}
	}
	t.Fatalf("no sandbox tool %s", name)
	return nil
}

// run calls tool name in sb with input and fails the test on an error.
func run(t *testing.T, sb sandboxtool.Sandbox, name string, input map[string]any) tool.Result {
	t.Helper()
	res, err := runErr(t, sb, name, input)
	if err != nil {
		t.Fatalf("%s %v: %v", name, input, err)
	}
	return res
}

func runErr(t *testing.T, sb sandboxtool.Sandbox, name string, input map[string]any) (tool.Result, error) {
	t.Helper()
	in, _ := json.Marshal(input)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return find(t, name).Run(ctx, sb, in)
}

func wantText(t *testing.T, res tool.Result, isError bool, parts ...string) {
	t.Helper()
	if res.IsError != isError {
		t.Errorf("IsError = %v, want %v: %q", res.IsError, isError, res.Text)
	}
	for _, p := range parts {
		if !strings.Contains(res.Text, p) {
			t.Errorf("result %q does not say %q", res.Text, p)
		}
	}
}

func TestSpecs(t *testing.T) {
	seen := map[string]bool{}
	for _, tl := range sandboxtool.Tools() {
		s := tl.Spec()
		if s.Side != tool.SideSandbox || s.Description == "" || !json.Valid(s.InputSchema) || seen[s.Name] {
			t.Errorf("spec %+v", s)
		}
		seen[s.Name] = true
		// Call is not how a sandbox tool runs: it needs a sandbox.
		if _, err := tl.Call(context.Background(), "k", json.RawMessage(`{}`)); err == nil {
			t.Errorf("%s: Call without a sandbox succeeded", s.Name)
		}
	}
	for _, name := range []string{"bash", "read_file", "write_file", "edit_file", "list_files", "glob", "grep", "save_artifact"} {
		if !seen[name] {
			t.Errorf("no %s", name)
		}
	}
}

func TestBash(t *testing.T) {
	b := newBox(t)
	wantText(t, run(t, b.sandbox("k1"), "bash", map[string]any{"command": "echo out; echo err >&2"}), false, "out\n", "err\n", "[exit code 0]")
	wantText(t, run(t, b.sandbox("k2"), "bash", map[string]any{"command": "exit 3"}), true, "[exit code 3]")
	wantText(t, run(t, b.sandbox("k3"), "bash", map[string]any{"command": "sleep 30", "timeout_s": 1}), true, "[killed: timed out after 1 s]")
	wantText(t, run(t, b.sandbox("k4"), "bash", map[string]any{"command": "kill -9 $$"}), true, "[killed by signal 9")

	// The idempotency key reaches the executor: asking again with the
	// same key returns the first answer and runs nothing.
	for range 2 {
		wantText(t, run(t, b.sandbox("same"), "bash", map[string]any{"command": "echo x >> count; wc -l < count"}), false, "1\n")
	}
	if data, _ := os.ReadFile(filepath.Join(b.root, "count")); string(data) != "x\n" {
		t.Errorf("the command ran again under the same key: count = %q", data)
	}

	// A huge output keeps its head and tail, and says what it dropped.
	res := run(t, b.sandbox("k5"), "bash", map[string]any{"command": "echo first; head -c 3000000 /dev/zero | tr '\\0' a; echo; echo last"})
	wantText(t, res, false, "first\n", "last\n", "bytes of output dropped")
	if len(res.Text) > 1200<<10 {
		t.Errorf("output of %d bytes is not bounded", len(res.Text))
	}
}

// TestBashOutOfMemory: bash asks the sandbox, around the command, how many
// of its processes the memory limit killed, and says so.
func TestBashOutOfMemory(t *testing.T) {
	b := newBox(t)
	sb := b.sandbox("k")
	kills := 0
	sb.OOMKills = func(context.Context) (int, int64, error) {
		n := kills
		kills++ // the second ask (after the command) sees one more
		return n, 256 << 20, nil
	}
	wantText(t, run(t, sb, "bash", map[string]any{"command": "kill -9 $$"}), true, "[killed: out of memory (limit 256 MiB)")
}

func TestFileTools(t *testing.T) {
	b := newBox(t)
	sb := b.sandbox("")
	wantText(t, run(t, sb, "write_file", map[string]any{"path": "src/a.txt", "content": "one\ntwo\nthree\nfour\n"}), false, "wrote 19 bytes")
	wantText(t, run(t, sb, "read_file", map[string]any{"path": "src/a.txt", "offset": 2, "limit": 2}), false,
		"     2\ttwo\n", "     3\tthree\n", "[lines 2-3 of 4; read on with offset 4]")
	wantText(t, run(t, sb, "read_file", map[string]any{"path": "src/a.txt", "offset": 9}), false, "offset 9 is past its end")
	wantText(t, run(t, sb, "read_file", map[string]any{"path": "nope.txt"}), true)

	wantText(t, run(t, sb, "edit_file", map[string]any{"path": "src/a.txt", "old": "two", "new": "2"}), false, "replaced 1 occurrence(s)")
	wantText(t, run(t, sb, "edit_file", map[string]any{"path": "src/a.txt", "old": "two", "new": "2"}), true)
	if data, _ := os.ReadFile(filepath.Join(b.root, "src/a.txt")); string(data) != "one\n2\nthree\nfour\n" {
		t.Errorf("after edit: %q", data)
	}
	os.WriteFile(filepath.Join(b.root, "src/bin"), []byte("a\x00b"), 0o644)
	wantText(t, run(t, sb, "read_file", map[string]any{"path": "src/bin"}), true, "binary file")

	wantText(t, run(t, sb, "list_files", map[string]any{"path": "src"}), false, "a.txt\t17", "bin\t3")
	wantText(t, run(t, sb, "list_files", map[string]any{"path": "."}), false, "src/")
	wantText(t, run(t, sb, "glob", map[string]any{"pattern": "**/*.txt"}), false, "src/a.txt")
	wantText(t, run(t, sb, "glob", map[string]any{"pattern": "*.go"}), false, "no files match *.go")
	wantText(t, run(t, sb, "grep", map[string]any{"pattern": "^th", "path": "src"}), false, "a.txt:3: three")
	wantText(t, run(t, sb, "grep", map[string]any{"pattern": "zzz"}), false, "no matches")
}

// TestSaveArtifact: the file is streamed into the blob store and comes
// back in the result as an artifact (the tool appends nothing anywhere).
func TestSaveArtifact(t *testing.T) {
	b := newBox(t)
	sb := b.sandbox("")
	data := strings.Repeat("0123456789abcdef", 600_000) // 9.6 MB: several 4 MiB ranges
	if err := os.WriteFile(filepath.Join(b.root, "report.txt"), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	res := run(t, sb, "save_artifact", map[string]any{"path": "report.txt", "name": "r.txt"})
	wantText(t, res, false, `as artifact "r.txt"`)
	sum := sha256.Sum256([]byte(data))
	want := tool.Artifact{Name: "r.txt", Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data)), Source: "main:report.txt"}
	if len(res.Artifacts) != 1 || res.Artifacts[0].Name != want.Name || res.Artifacts[0].Digest != want.Digest ||
		res.Artifacts[0].Size != want.Size || res.Artifacts[0].Source != want.Source {
		t.Fatalf("artifacts = %+v, want %+v", res.Artifacts, want)
	}
	rc, err := b.blobs.Open(context.Background(), want.Digest)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != data {
		t.Errorf("the stored blob differs from the file (%d bytes, want %d)", len(got), len(data))
	}
	res = run(t, sb, "save_artifact", map[string]any{"path": "missing.txt"})
	wantText(t, res, true)
	if len(res.Artifacts) != 0 {
		t.Errorf("a missing file saved artifacts: %+v", res.Artifacts)
	}
}

// TestExecutorGone: when the executor cannot be reached, a tool returns an
// error of kind unavailable (not a result for the model), so the loop can
// check whether the sandbox is gone and replace it.
func TestExecutorGone(t *testing.T) {
	b := newBox(t)
	b.stop()
	for _, name := range []string{"write_file", "read_file", "list_files"} {
		_, err := runErr(t, b.sandbox(""), name, map[string]any{"path": "a", "content": "x"})
		if !errors.Is(err, errdefs.ErrUnavailable) {
			t.Errorf("%s with no executor: err = %v, want unavailable", name, err)
		}
	}
	_, err := runErr(t, b.sandbox("k"), "bash", map[string]any{"command": "true"})
	var mid *sandboxtool.EndedMidCall
	if !errors.As(err, &mid) || mid.Started {
		t.Errorf("bash with no executor: err = %v, want an EndedMidCall that never started", err)
	}
}
