package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// canary is a secret value recognisable wherever it would leak.
const canary = "canary-7d2e51-secret-VALUE-never-printed"

// TestSecrets drives `reins secret` against a real reins serve: a value
// piped in (less its newline) is stored and listed with its size, never
// shown; bad names and values are refused with their rule; a tenant sees
// its own scope only, and another's secret is "not found" in the words of
// a missing one; the value is in no output, no line of the service's log
// and nowhere in clear in the database or its WAL; it survives a restart.
func TestSecrets(t *testing.T) {
	s := startService(t)
	var outputs bytes.Buffer
	run := func(env []string, in string, args ...string) result {
		t.Helper()
		r := s.runInput(env, strings.NewReader(in), args...)
		fmt.Fprintln(&outputs, r.stdout, r.stderr)
		return r
	}

	fi, err := os.Lstat(filepath.Join(s.dataDir, "secret.key"))
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || fi.Size() != 32 {
		t.Fatalf("the key made on first start: %v, %v; want 32 bytes, mode 0600", fi, err)
	}

	r := run(nil, canary+"\n", "secret", "set", "API_TOKEN")
	if r.code != 0 || !strings.Contains(r.stderr, "secret API_TOKEN set") {
		t.Fatalf("secret set: %s", r)
	}
	r = run(nil, "", "secret", "ls", "--json")
	var list []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &list); r.code != 0 || err != nil {
		t.Fatalf("secret ls --json: %v\n%s", err, r)
	}
	if len(list) != 1 || list[0]["name"] != "API_TOKEN" || anyInt(list[0]["size"]) != int64(len(canary)) ||
		anyInt(list[0]["created_unix_nano"]) <= 0 || list[0]["updated_unix_nano"] == nil || list[0]["created_time"] == "" || len(list[0]) != 6 {
		t.Errorf("secret ls --json = %v, want API_TOKEN of %d bytes (the newline stripped) with its times, nothing else", list, len(canary))
	}
	if r := run(nil, "", "secret", "ls"); r.code != 0 || !strings.Contains(r.stdout, "API_TOKEN") || !strings.Contains(r.stdout, "NAME") {
		t.Errorf("secret ls: %s", r)
	}

	// Bad input, refused with the rule.
	for _, bad := range []struct {
		in   string
		args []string
		want string
	}{
		{"v", []string{"secret", "set", "1X"}, "letters, digits and '_'"},
		{"v", []string{"secret", "set", "A-B"}, "letters, digits and '_'"},
		{"v", []string{"secret", "set", strings.Repeat("N", 200)}, "at most 128 bytes"},
		{"\n", []string{"secret", "set", "EMPTY"}, "the value is empty"},
		{strings.Repeat(canary, 2000), []string{"secret", "set", "BIG"}, "over the limit of 16 KiB"},
		{"", []string{"secret", "rm", "NEVER_SET"}, `secret NEVER_SET not found: set it with "reins secret set NEVER_SET"`},
		{"", []string{"secret", "set"}, "accepts 1 arg"},
	} {
		r := run(nil, bad.in, bad.args...)
		if r.code == 0 || !strings.Contains(r.stderr, bad.want) {
			t.Errorf("reins %.40s: %s; want a failure saying %q", strings.Join(bad.args, " "), r, bad.want)
		}
	}

	// Tenants: their own scope only.
	acme := []string{"REINS_TOKEN=" + s.newTenant("acme")}
	if r := run(acme, "", "secret", "ls", "--json"); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("acme lists the admin's secrets: %s", r)
	}
	r = run(acme, "", "secret", "rm", "API_TOKEN")
	if r.code == 0 || !strings.Contains(r.stderr, `secret API_TOKEN not found: set it with "reins secret set API_TOKEN"`) {
		t.Errorf("acme removes the admin's secret: %s", r)
	}
	if r := run(acme, "acme's own", "secret", "set", "API_TOKEN"); r.code != 0 {
		t.Fatalf("acme sets its own API_TOKEN: %s", r)
	}
	if r := run(nil, "", "secret", "ls", "--json"); !strings.Contains(r.stdout, fmt.Sprintf(`"size": %d`, len(canary))) {
		t.Errorf("acme's API_TOKEN changed the admin's: %s", r)
	}

	// Nothing in clear on disk, while the service runs (the WAL holds
	// the latest writes) and once it stopped.
	noCanaryOnDisk := func(when string) {
		t.Helper()
		n := 0
		for _, f := range []string{"reins.db", "reins.db-wal"} {
			data, err := os.ReadFile(filepath.Join(s.dataDir, f))
			if err == nil {
				n += len(data)
			}
			if bytes.Contains(data, []byte(canary)) {
				t.Errorf("%s: %s holds the secret in clear", when, f)
			}
		}
		if n == 0 {
			t.Errorf("%s: no database to look into", when)
		}
	}
	noCanaryOnDisk("running")
	s.stop()
	noCanaryOnDisk("stopped")
	if strings.Contains(s.log.String(), canary) {
		t.Errorf("the service's log shows the secret:\n%s", s.log)
	}
	if strings.Contains(outputs.String(), canary) {
		t.Errorf("a command's output shows the secret:\n%s", outputs.String())
	}

	s.start()
	if r := run(nil, "", "secret", "ls"); !strings.Contains(r.stdout, "API_TOKEN") {
		t.Errorf("after a restart: %s", r)
	}
	if r := run(nil, "", "secret", "rm", "API_TOKEN"); r.code != 0 {
		t.Errorf("secret rm: %s", r)
	}
	if r := run(acme, "", "secret", "ls"); !strings.Contains(r.stdout, "API_TOKEN") {
		t.Errorf("the admin's rm removed acme's secret: %s", r)
	}
}

// TestSecretKeyRefused: reins serve refuses to start, saying what to do,
// on a key file that is world-readable, of the wrong size or a symbolic
// link (which it does not follow), and starts again once it is right.
func TestSecretKeyRefused(t *testing.T) {
	s := startService(t)
	s.stop()
	key := filepath.Join(s.dataDir, "secret.key")
	good, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	refused := func(what, want string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(binDir, "reins"), "serve", "--data-dir", s.dataDir, "--addr", s.addr)
		done := make(chan struct{})
		var out []byte
		go func() { out, _ = cmd.CombinedOutput(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Fatalf("%s: reins serve started:\n%s", what, out)
		}
		if cmd.ProcessState.Success() || !strings.Contains(string(out), want) {
			t.Errorf("%s: reins serve exited %v, want a failure saying %q:\n%s", what, cmd.ProcessState, want, out)
		}
	}
	os.Chmod(key, 0o644)
	refused("mode 0644", "chmod 600")
	os.Chmod(key, 0o600)
	os.WriteFile(key, append(good, '\n'), 0o600)
	refused("33 bytes", "has 33 bytes, not 32")
	elsewhere := filepath.Join(t.TempDir(), "key")
	os.WriteFile(elsewhere, good, 0o600)
	os.Remove(key)
	os.Symlink(elsewhere, key)
	refused("a symbolic link", "is a symbolic link")
	os.Remove(key)
	os.WriteFile(key, good, 0o600)
	s.start()
	if r := s.run("secret", "ls", "--json"); r.code != 0 {
		t.Errorf("with the key put right: %s", r)
	}
}
