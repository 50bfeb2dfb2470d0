package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

type templateJSON struct {
	Name        string   `json:"name"`
	Snapshot    string   `json:"snapshot"`
	CachedSteps int      `json:"cached_steps"`
	Env         []string `json:"env"`
}

func (s *service) templates() map[string]templateJSON {
	s.t.Helper()
	var ts []templateJSON
	out := s.must("template", "ls", "--json")
	if err := json.Unmarshal([]byte(out), &ts); err != nil {
		s.t.Fatalf("template ls --json: %v\n%s", err, out)
	}
	m := map[string]templateJSON{}
	for _, t := range ts {
		m[t.Name] = t
	}
	return m
}

// siteDir is a directory to --copy: a file and a symbolic link to it.
func siteDir(t *testing.T, content string) string {
	dir := filepath.Join(t.TempDir(), "site")
	os.Mkdir(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "index.html"), []byte(content), 0o644)
	os.Symlink("index.html", filepath.Join(dir, "link"))
	return dir
}

// TestTemplateBuild: steps run in the order given, env applies to the
// later steps and to the template's sandboxes, a copied directory keeps
// its symbolic link, an unchanged build takes every step from the cache
// (the step that appends runs once), a changed middle step reruns from
// there, a failed step stops the build with its output and exit code and
// leaves the template as it was, and rm is refused while a sandbox
// uses the template.
func TestTemplateBuild(t *testing.T) {
	for _, img := range []string{"busybox", "debian"} {
		t.Run(img, func(t *testing.T) { testTemplateBuild(t, img) })
	}
}

func testTemplateBuild(t *testing.T, img string) {
	s := startService(t)
	site := siteDir(t, "<h1>site</h1>\n")
	build := func(greeting string, extra ...string) result {
		args := append([]string{"template", "build", "app", "--from", img,
			"--run", "echo one >> /build.log",
			"--env", "GREETING=" + greeting,
			"--run", `echo "$GREETING" >> /build.log`,
			"--copy", site + ":/srv/site",
			"--run", "cat /srv/site/index.html >> /build.log"}, extra...)
		return s.run(args...)
	}
	r := build("hello")
	if r.code != 0 {
		t.Fatalf("build: %s", r)
	}
	for i, want := range []string{"step 1/5 RUN echo one >> /build.log", "step 2/5 ENV GREETING=hello", "step 3/5 RUN", "step 4/5 COPY " + site + " /srv/site", "step 5/5 RUN cat"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("progress lacks %q (%d):\n%s", want, i, r.stderr)
		}
	}
	if !strings.Contains(r.stderr, "saved ") || !strings.Contains(r.stderr, " files, ") {
		t.Errorf("progress does not say what each step saved:\n%s", r.stderr)
	}
	first := s.templates()["app"]
	if first.Snapshot == "" || len(first.Env) != 1 || first.Env[0] != "GREETING=hello" {
		t.Fatalf("template ls: %+v", first)
	}

	id := s.create("--image", "template:app")
	if got := s.must("sandbox", "exec", id, "--", "cat", "/build.log"); got != "one\nhello\n<h1>site</h1>\n" {
		t.Errorf("/build.log = %q: steps out of order or missing", got)
	}
	if got := s.must("sandbox", "exec", id, "--", "sh", "-c", "echo $GREETING"); got != "hello\n" {
		t.Errorf("GREETING in the template's sandbox = %q", got)
	}
	if got := s.must("sandbox", "exec", id, "--", "readlink", "/srv/site/link"); got != "index.html\n" {
		t.Errorf("the copied link reads %q, want index.html (kept as a link)", got)
	}
	if show := s.must("sandbox", "show", id, "--json"); !strings.Contains(show, `"template:app"`) {
		t.Errorf("the sandbox does not name its origin:\n%s", show)
	}

	// rm is refused while the sandbox uses it, naming it.
	if r := s.run("template", "rm", "app"); r.code == 0 || !strings.Contains(r.stderr, "sandbox:"+id) {
		t.Errorf("template rm while %s uses it: %s", id, r)
	}

	// The template's snapshot cannot be removed from under it.
	if r := s.run("snapshot", "rm", first.Snapshot); r.code == 0 || !strings.Contains(r.stderr, "template:app") {
		t.Errorf("snapshot rm of the template's snapshot: %s; want it refused, naming template:app", r)
	}
	// The records and the cache survive a restart of the service.
	s.stop()
	s.start()
	// The same build again: every step cached, nothing ran twice.
	r = build("hello")
	if r.code != 0 {
		t.Fatalf("second build: %s", r)
	}
	if n := strings.Count(r.stderr, ": cached\n"); n != 5 {
		t.Errorf("second build: %d steps cached, want 5:\n%s", n, r.stderr)
	}
	if got := s.templates()["app"]; got.Snapshot != first.Snapshot || got.CachedSteps != 5 {
		t.Errorf("second build: %+v, want snapshot %s and 5 cached steps", got, first.Snapshot)
	}
	id2 := s.create("--image", "template:app")
	if got := s.must("sandbox", "exec", id2, "--", "cat", "/build.log"); got != "one\nhello\n<h1>site</h1>\n" {
		t.Errorf("after a cached rebuild /build.log = %q: a step ran again", got)
	}

	// A changed middle step: step 1 cached, 2 to 5 run again.
	r = build("bye")
	if r.code != 0 {
		t.Fatalf("third build: %s", r)
	}
	if !strings.Contains(r.stderr, "step 1/5 RUN echo one >> /build.log: cached") || strings.Contains(r.stderr, "GREETING=bye: cached") ||
		strings.Contains(r.stderr, "step 5/5 RUN cat /srv/site/index.html >> /build.log: cached") {
		t.Errorf("third build: want step 1 alone cached:\n%s", r.stderr)
	}
	id3 := s.create("--image", "template:app")
	if got := s.must("sandbox", "exec", id3, "--", "cat", "/build.log"); got != "one\nbye\n<h1>site</h1>\n" {
		t.Errorf("after a changed step /build.log = %q", got)
	}
	third := s.templates()["app"]

	// A failing step: its output and exit code, and app stays as it was.
	r = s.run("template", "build", "app", "--from", img, "--run", "echo fine", "--run", "echo it broke >&2; exit 7", "--run", "echo never")
	if r.code != 7 || !strings.Contains(r.stderr, "it broke") || !strings.Contains(r.stderr, "step 2/3") || !strings.Contains(r.stderr, "exit code 7") {
		t.Errorf("failing build: %s; want exit 7 with the step's output", r)
	}
	if strings.Contains(r.stderr, "step 3/3") {
		t.Errorf("a step ran after the failed one:\n%s", r.stderr)
	}
	if got := s.templates()["app"]; got.Snapshot != third.Snapshot {
		t.Errorf("a failed build changed app: %+v, was %+v", got, third)
	}
	for _, sb := range []string{id, id2, id3} {
		s.must("sandbox", "rm", sb)
	}
	s.must("template", "rm", "app")
	if _, ok := s.templates()["app"]; ok {
		t.Error("template rm left app listed")
	}
	if r := s.run("sandbox", "create", "--image", "template:app"); r.code == 0 || !strings.Contains(r.stderr, "template app not found") {
		t.Errorf("create from a removed template: %s", r)
	}
	noBuildSandboxes(t, s)
}

// noBuildSandboxes checks that no build sandbox is left.
func noBuildSandboxes(t *testing.T, s *service) {
	t.Helper()
	eventually(t, 10*time.Second, "no build sandbox left", func() (bool, string) {
		out := s.must("sandbox", "ls", "--json")
		return !strings.Contains(out, `"reins.template"`), out
	})
}

// TestTemplateStartReady: a template with --start and --ready makes
// sandboxes whose server already answers on their first exec; a ready
// that never succeeds fails the build with a clear error.
func TestTemplateStartReady(t *testing.T) {
	s := startService(t)
	r := s.run("template", "build", "web", "--from", "busybox",
		"--run", "mkdir -p /www && echo hello-web > /www/index.html",
		"--start", "httpd -f -p 8080 -h /www",
		"--ready", "wget -q -O- http://127.0.0.1:8080/")
	if r.code != 0 || !strings.Contains(r.stderr, "START httpd") || !strings.Contains(r.stderr, "READY wget") {
		t.Fatalf("build: %s", r)
	}
	id := s.create("--image", "template:web")
	if got := s.must("sandbox", "exec", id, "--", "wget", "-q", "-O-", "http://127.0.0.1:8080/"); got != "hello-web\n" {
		t.Errorf("the first exec got %q from the template's server, want hello-web", got)
	}
	// Suspended and resumed on a fresh guest, it runs the start again.
	s.must("sandbox", "suspend", id)
	s.must("sandbox", "resume", id)
	if got := s.must("sandbox", "exec", id, "--", "wget", "-q", "-O-", "http://127.0.0.1:8080/"); got != "hello-web\n" {
		t.Errorf("after a resume the template's server answered %q, want hello-web", got)
	}
	s.must("sandbox", "rm", id)

	// A ready that succeeds in the build sandbox (its /tmp, a tmpfs, is
	// not in the snapshot) but never in the template's sandboxes: create
	// fails with the timeout and leaves no running sandbox.
	r = s.run("template", "build", "flaky", "--from", "busybox", "--run", "touch /tmp/only-in-the-build",
		"--start", "echo started; exec sleep 600", "--ready", "test -f /tmp/only-in-the-build", "--ready-timeout", "2s")
	if r.code != 0 {
		t.Fatalf("build flaky: %s", r)
	}
	r = s.run("sandbox", "create", "--image", "template:flaky")
	if r.code == 0 || !strings.Contains(r.stderr, "did not exit 0 within 2s") || !strings.Contains(r.stderr, "started") {
		t.Errorf("create from a template whose ready fails: %s", r)
	}
	if out := s.must("sandbox", "ls", "--json"); strings.Contains(out, "SANDBOX_STATE_RUNNING") {
		t.Errorf("a create whose ready failed left a running sandbox:\n%s", out)
	}

	r = s.run("template", "build", "never", "--from", "busybox",
		"--start", "echo listening; exec sleep 600", "--ready", "echo not yet; false", "--ready-timeout", "2s")
	if r.code == 0 || !strings.Contains(r.stderr, "did not exit 0 within 2s") || !strings.Contains(r.stderr, "not yet") {
		t.Errorf("a ready that never succeeds: %s", r)
	}
	if _, ok := s.templates()["never"]; ok {
		t.Error("a template whose ready never succeeded was made")
	}
	noBuildSandboxes(t, s)
}

// TestTemplateCancelResume: Ctrl-C in step 3 leaves no template and no
// build sandbox; the next build takes steps 1 and 2 from the cache.
func TestTemplateCancelResume(t *testing.T) {
	s := startService(t)
	args := []string{"template", "build", "slow", "--from", "busybox",
		"--run", "echo one >> /log", "--run", "echo two >> /log", "--run", "echo three >> /log; sleep 600"}
	cmd := exec.Command(filepath.Join(binDir, "reins"), args...)
	cmd.Env = append(os.Environ(), "REINS_URL="+s.url, "REINS_TOKEN="+s.token)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the build at step 3", func() (bool, string) {
		return strings.Contains(stderr.String(), "step 3/3"), stderr.String()
	})
	time.Sleep(500 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the CLI did not end after Ctrl-C")
	}
	noBuildSandboxes(t, s)
	if _, ok := s.templates()["slow"]; ok {
		t.Error("a cancelled build left a template")
	}
	args[len(args)-1] = "echo three >> /log"
	r := s.run(args...)
	if r.code != 0 || !strings.Contains(r.stderr, "step 1/3 RUN echo one >> /log: cached") || !strings.Contains(r.stderr, "step 2/3 RUN echo two >> /log: cached") ||
		strings.Contains(r.stderr, "step 3/3 RUN echo three >> /log: cached") {
		t.Fatalf("the build after the cancel: %s; want steps 1-2 cached", r)
	}
	id := s.create("--image", "template:slow")
	if got := s.must("sandbox", "exec", id, "--", "cat", "/log"); got != "one\ntwo\nthree\n" {
		t.Errorf("/log = %q", got)
	}
}

// syncBuffer is a bytes.Buffer safe to read while a process writes it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
