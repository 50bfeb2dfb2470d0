package e2e

import (
	"archive/tar"
	"bytes"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCLIHabits tries the CLI as someone used to docker and kubectl would,
// on a real sandbox: units, short flags, exec without "--", id prefixes,
// logs and kill by tag, cp with "-", ls -q and rm --label, show's env,
// TTL and usage.
func TestCLIHabits(t *testing.T) {
	s := startService(t)
	id := s.create("--memory", "256Mi", "--cpus", "500m", "-e", "GREETING=hi", "-e", "API_KEY=sk-live-123", "-w", "/tmp",
		"-l", "habit=yes", "--ttl", "10m")
	short := id[:5]

	show := s.must("sandbox", "show", short)
	for _, want := range []string{`id\s+` + id, `cpus\s+0\.5\n`, `memory\s+256 MiB\n`, `workdir\s+/tmp\n`, `env\s+GREETING=hi\n\s+API_KEY=•••• \(masked\)\n`,
		`expires\s+in (9m\d+s|10m0s) \(at .*; ttl 10m0s\)`, `memory used\s+\d.* now`, `usage\s+disk .* of .*, \d+ process(es)?, CPU \d`} {
		if !regexp.MustCompile(want).MatchString(show) {
			t.Errorf("show lacks %s:\n%s", want, show)
		}
	}
	if strings.Contains(show, "sk-live") {
		t.Errorf("show printed a secret's value:\n%s", show)
	}
	if regexp.MustCompile(`usage\s+memory`).MatchString(show) {
		t.Errorf("show gives memory twice, in memory used and in usage:\n%s", show)
	}

	// Everything after the id is the command, its flags included.
	if out := s.must("sandbox", "exec", short, "uname", "-s"); out != "Linux\n" {
		t.Errorf("exec PREFIX uname -s: %q", out)
	}
	if out := s.must("sandbox", "exec", "-e", "A=b", "-w", "/", short, "sh", "-c", "echo $A $GREETING $(pwd)"); out != "b hi /\n" {
		t.Errorf("exec -e -w: %q", out)
	}
	if out := s.must("sandbox", "exec", id, "--", "echo", "-n", "dashes"); out != "dashes" {
		t.Errorf("exec ID -- CMD: %q", out)
	}
	if r := s.run("sandbox", "exec", short); r.code != 2 || !strings.Contains(r.stderr, "requires at least 2 arg") {
		t.Errorf("exec without a command: %s", r)
	}

	// A background process named by its tag.
	if r := s.run("sandbox", "exec", "-d", "--tag", "web", short, "sh", "-c", "echo serving; exec sleep 300"); r.code != 0 {
		t.Fatalf("exec -d --tag web: %s", r)
	}
	eventually(t, 10*time.Second, "logs by tag", func() (bool, string) {
		out := s.must("sandbox", "logs", short, "web")
		return out == "serving\n", out
	})
	s.must("sandbox", "kill", short, "web", "-s", "TERM")
	eventually(t, 10*time.Second, "the tagged process ends", func() (bool, string) {
		ps := s.must("sandbox", "ps", id)
		for _, line := range strings.Split(ps, "\n") {
			if strings.Contains(line, "web") {
				return !strings.Contains(line, "running"), ps
			}
		}
		return false, ps
	})
	if r := s.run("sandbox", "logs", short, "nope"); r.code != 2 || !strings.Contains(r.stderr, `"nope" is neither a PID nor the tag`) {
		t.Errorf("logs of an unknown tag: %s", r)
	}

	// cp with "-": a tar out on stdout, a tar in from stdin.
	s.must("sandbox", "exec", short, "sh", "-c", "mkdir -p /workspace/out && echo report > /workspace/out/a.txt")
	r := s.run("sandbox", "cp", short+":/workspace/out", "-")
	if r.code != 0 {
		t.Fatalf("cp ID:/dir -: %s", r)
	}
	got := map[string]string{}
	tr := tar.NewReader(strings.NewReader(r.stdout))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("cp ID:/dir - wrote no tar: %v", err)
		}
		body, _ := io.ReadAll(tr)
		got[h.Name] = string(body)
	}
	if len(got) != 2 || got["out/a.txt"] != "report\n" {
		t.Errorf("the tar on stdout: %q", got)
	}
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	tw.WriteHeader(&tar.Header{Name: "in/b.txt", Mode: 0o644, Size: 5, Typeflag: tar.TypeReg})
	tw.Write([]byte("beta\n"))
	tw.Close()
	if r := s.runInput(nil, &in, "sandbox", "cp", "-", short+":/workspace"); r.code != 0 {
		t.Fatalf("cp - ID:/dir: %s", r)
	}
	if out := s.must("sandbox", "exec", short, "cat", "/workspace/in/b.txt"); out != "beta\n" {
		t.Errorf("after cp -: %q", out)
	}

	// Listing and removing in bulk.
	other := s.create("-l", "habit=no")
	if ls := strings.Fields(s.must("sandbox", "ls", "-q")); !slices.Contains(ls, id) || !slices.Contains(ls, other) {
		t.Errorf("ls -q: %q", ls)
	}
	r = s.run("sandbox", "rm", "--label", "habit=yes")
	if r.code != 0 || r.stdout != id+"\n" || r.stderr != "removed 1 sandbox\n" {
		t.Errorf("rm --label habit=yes: %s", r)
	}
	if ls := s.must("sandbox", "ls", "-q", "--all"); strings.Contains(ls, id) || !strings.Contains(ls, other) {
		t.Errorf("after rm --label: %q", ls)
	}
	s.must("sandbox", "rm", other[:6])
}

// TestRunsSayWhatTheyDid: approve, answer and cancel print what they did,
// runs show gives the question a run waits on, and an offline run claims
// no cost.
func TestRunsSayWhatTheyDid(t *testing.T) {
	s := startService(t)
	pol := writePolicy(t, "rules:\n  - name: hold\n    tool: bash\n    action: ask\n")
	script := writeScript(t, bash("rm -rf build"),
		map[string]any{"tool_calls": []any{map[string]any{"name": "ask_human", "input": map[string]any{"question": "Which branch?"}}}},
		map[string]any{"text": "done"})
	id := strings.TrimSpace(s.must("run", "--detach", "--policy", pol, "--model", "script:"+script, "clean up"))
	short := strings.TrimPrefix(id, "run_")[:6]
	waitStatus(t, s, id, "RUN_STATUS_WAITING_APPROVAL")
	if out := s.must("runs", "approve", short); !strings.HasPrefix(out, "approved call_") || !strings.Contains(out, " of "+id+": bash `rm -rf build`") {
		t.Errorf("runs approve: %q", out)
	}
	eventually(t, 60*time.Second, "the run asks", func() (bool, string) {
		out := s.must("runs", "show", id)
		return regexp.MustCompile(`question\s+Which branch\?`).MatchString(out), out
	})
	if out := s.must("runs", "answer", id, "main"); out != "answered "+id+`'s question "Which branch?": "main"`+"\n" {
		t.Errorf("runs answer: %q", out)
	}
	waitStatus(t, s, id, "RUN_STATUS_SUCCEEDED")
	show := s.must("runs", "show", short)
	if !regexp.MustCompile(`cost\s+none \(offline model\)`).MatchString(show) || strings.Contains(show, "$") {
		t.Errorf("runs show of an offline run:\n%s", show)
	}

	held := strings.TrimSpace(s.must("run", "--detach", "--policy", pol, "--model", "script:"+script, "clean up again"))
	waitStatus(t, s, held, "RUN_STATUS_WAITING_APPROVAL")
	if out := s.must("runs", "cancel", held); out != "cancelled "+held+" (it was waiting_approval, after 1 step)\n" {
		t.Errorf("runs cancel: %q", out)
	}
}
