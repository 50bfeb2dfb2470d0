package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	reinsclient "github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/errdefs"
)

// plain is a caller with no reins code: net/http, JSON, the token.
type plain struct {
	t     *testing.T
	url   string
	token string
}

// call POSTs body as JSON to a Connect procedure (or any route) and
// returns the status and the decoded answer.
func (p plain) call(route string, body any) (int, map[string]any) {
	p.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		p.t.Fatal(err)
	}
	return p.do(http.MethodPost, route, "application/json", bytes.NewReader(b), nil)
}

func (p plain) do(method, route, ctype string, body io.Reader, header http.Header) (int, map[string]any) {
	p.t.Helper()
	req, err := http.NewRequest(method, p.url+route, body)
	if err != nil {
		p.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]any{}
	data, _ := io.ReadAll(resp.Body)
	if len(data) > 0 {
		if err := json.Unmarshal(data, &out); err != nil {
			p.t.Fatalf("%s %s answered %s, not JSON: %.300s", method, route, resp.Status, data)
		}
	}
	return resp.StatusCode, out
}

func rawRoute(id, p string) string {
	return "/v1/sandboxes/" + id + "/files?path=" + url.QueryEscape(p)
}

const runCommandRoute = "/reins.v1.SandboxService/RunCommand"

// TestRunCommand: one command to completion through the unary call, in
// plain JSON over HTTP and with the Go client: exit codes and both
// streams, stdin, the timeout reason, output cut at the cap while the
// command runs to its end, bad requests refused in words.
func TestRunCommand(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			s := startService(t)
			sb := s.create("--backend", backend)
			p := plain{t, s.url, s.token}

			code, out := p.call(runCommandRoute, map[string]any{"sandbox_id": sb, "command": "echo out; echo err >&2; exit 3"})
			if code != 200 || out["stdout"] != "out\n" || out["stderr"] != "err\n" || out["exit_code"] != 3.0 || out["reason"] != "exited" || out["truncated"] != false {
				t.Errorf("exit 3: %d %v", code, out)
			}
			code, out = p.call(runCommandRoute, map[string]any{"sandbox_id": sb, "argv": []string{"cat"},
				"stdin": base64.StdEncoding.EncodeToString([]byte("fed through stdin\n"))})
			if code != 200 || out["stdout"] != "fed through stdin\n" || out["exit_code"] != 0.0 {
				t.Errorf("stdin: %d %v", code, out)
			}
			start := time.Now()
			code, out = p.call(runCommandRoute, map[string]any{"sandbox_id": sb, "command": "echo begun; sleep 30", "timeout_ms": 500})
			if code != 200 || out["reason"] != "timeout" || out["stdout"] != "begun\n" || time.Since(start) > 15*time.Second {
				t.Errorf("timeout: %d %v after %s", code, out, time.Since(start))
			}
			// 3 MB of output, 1000 bytes kept; the command still runs on
			// to write its marker file.
			code, out = p.call(runCommandRoute, map[string]any{"sandbox_id": sb, "max_output_bytes": 1000,
				"command": "head -c 3000000 /dev/zero | tr '\\0' x; echo done > /tmp/ran-on"})
			if so, _ := out["stdout"].(string); code != 200 || len(so) != 1000 || out["truncated"] != true || out["exit_code"] != 0.0 {
				t.Errorf("truncation: %d, %d bytes, %v %v", code, len(so), out["truncated"], out["exit_code"])
			}
			if code, out = p.call(runCommandRoute, map[string]any{"sandbox_id": sb, "command": "cat /tmp/ran-on"}); out["stdout"] != "done\n" {
				t.Errorf("the cut command did not run to its end: %d %v", code, out)
			}
			code, out = p.call(runCommandRoute, map[string]any{"sandbox_id": sb, "command": "true", "argv": []string{"true"}})
			if code != 400 || out["code"] != "invalid_argument" || !strings.Contains(out["message"].(string), "not both") {
				t.Errorf("command and argv: %d %v", code, out)
			}
			code, out = p.call(runCommandRoute, map[string]any{"sandbox_id": sb, "command": "true", "max_output_bytes": 17 << 20})
			if code != 400 || out["code"] != "invalid_argument" {
				t.Errorf("a cap past 16 MiB: %d %v", code, out)
			}

			c := reinsclient.New(s.url, s.token)
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			resp, err := c.Sandbox(sb).RunCommand(ctx, &reinsv1.RunCommandRequest{Argv: []string{"sh", "-c", "printf '\\377ok'; kill -9 $$"}})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Stdout != "\uFFFDok" || resp.Reason != "signaled" || resp.ExitCode != 137 {
				t.Errorf("Go client, invalid UTF-8 and a signal: %+v", resp)
			}
		})
	}
}

// TestRawFiles: a 100 MiB file written and read back whole through the raw
// file routes, by plain HTTP and by the Go client, with equal sha256; the
// answers' shape; a directory and a missing file refused with their kinds.
func TestRawFiles(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			s := startService(t)
			sb := s.create("--backend", backend)
			p := plain{t, s.url, s.token}
			const size = 100 << 20
			want := patternSum(size)

			req, _ := http.NewRequest(http.MethodPut, s.url+rawRoute(sb, "/w/deep/big.bin")+"&mode=0600", io.LimitReader(&pattern{}, size))
			req.ContentLength = size
			req.Header.Set("Authorization", "Bearer "+s.token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var put map[string]any
			json.NewDecoder(resp.Body).Decode(&put)
			resp.Body.Close()
			if resp.StatusCode != 200 || put["path"] != "/w/deep/big.bin" || put["size_bytes"] == nil {
				t.Fatalf("PUT: %s %v", resp.Status, put)
			}
			if out := s.must("sandbox", "exec", sb, "--", "sh", "-c", "sha256sum /w/deep/big.bin; stat -c %a /w/deep/big.bin"); !strings.HasPrefix(out, want) || !strings.HasSuffix(out, "600\n") {
				t.Errorf("inside the sandbox: %q, want sha256 %s and mode 600", out, want)
			}
			req, _ = http.NewRequest(http.MethodGet, s.url+rawRoute(sb, "/w/deep/big.bin"), nil)
			req.Header.Set("Authorization", "Bearer "+s.token)
			resp, err = http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			h := sha256.New()
			n, err := io.Copy(h, resp.Body)
			resp.Body.Close()
			if err != nil || n != size || hex.EncodeToString(h.Sum(nil)) != want || resp.ContentLength != size ||
				resp.Header.Get("Content-Type") != "application/octet-stream" {
				t.Errorf("GET: %d bytes (Content-Length %d, %s), err %v, equal sum %v", n, resp.ContentLength, resp.Header.Get("Content-Type"), err, hex.EncodeToString(h.Sum(nil)) == want)
			}

			c := reinsclient.New(s.url, s.token)
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			sbc := c.Sandbox(sb)
			if err := sbc.WriteRaw(ctx, "/w/client.bin", io.LimitReader(&pattern{}, size), -1); err != nil {
				t.Fatal(err)
			}
			r, err := sbc.ReadRaw(ctx, "/w/client.bin")
			if err != nil {
				t.Fatal(err)
			}
			h.Reset()
			n, err = io.Copy(h, r)
			r.Close()
			if err != nil || n != size || hex.EncodeToString(h.Sum(nil)) != want {
				t.Errorf("Go client round trip: %d bytes, err %v", n, err)
			}
			// Into another mount (gVisor's /tmp is a tmpfs): a rename
			// cannot cross it, the socket does.
			if err := sbc.WriteRaw(ctx, "/tmp/small", strings.NewReader("small\n"), 6); err != nil {
				t.Fatal(err)
			}
			if out := s.must("sandbox", "exec", sb, "--", "cat", "/tmp/small"); out != "small\n" {
				t.Errorf("/tmp/small: %q", out)
			}

			code, out := p.do(http.MethodGet, rawRoute(sb, "/w/deep"), "", nil, nil)
			if code != 400 || out["code"] != "invalid_argument" || !strings.Contains(out["message"].(string), "is a directory") {
				t.Errorf("GET of a directory: %d %v", code, out)
			}
			code, out = p.do(http.MethodPut, rawRoute(sb, "/w/deep"), "", strings.NewReader("x"), nil)
			if code != 400 || !strings.Contains(out["message"].(string), "is a directory") {
				t.Errorf("PUT over a directory: %d %v", code, out)
			}
			code, out = p.do(http.MethodGet, rawRoute(sb, "/w/none"), "", nil, nil)
			if code != 404 || out["code"] != "not_found" {
				t.Errorf("GET of a missing file: %d %v", code, out)
			}
			code, out = p.do(http.MethodGet, rawRoute(sb, "relative"), "", nil, nil)
			if code != 400 || out["code"] != "invalid_argument" {
				t.Errorf("GET of a relative path: %d %v", code, out)
			}
		})
	}
}

// pattern is an endless stream of bytes that are not all alike, the same
// whatever the reads' sizes.
type pattern struct{ off int }

func (r *pattern) Read(p []byte) (int, error) {
	for i := range p {
		o := r.off + i
		p[i] = byte(o*7 + o/251)
	}
	r.off += len(p)
	return len(p), nil
}

func patternSum(n int64) string {
	h := sha256.New()
	io.Copy(h, io.LimitReader(&pattern{}, n))
	return hex.EncodeToString(h.Sum(nil))
}

// TestExecutorJSON: the executor's unary calls answer a plain JSON caller
// in the API's JSON form: a range of lines as text, a literal grep, a
// glob with each path's info, an edit; an error keeps its kind.
func TestExecutorJSON(t *testing.T) {
	s := startService(t)
	sb := s.create("--backend", "gvisor")
	p := plain{t, s.url, s.token}
	call := func(method string, body any) (int, map[string]any) {
		t.Helper()
		b, _ := json.Marshal(body)
		return p.do(http.MethodPost, "/reins.executor.v1.Executor/"+method, "application/json", bytes.NewReader(b), http.Header{"Reins-Sandbox": {sb}})
	}
	s.must("sandbox", "exec", sb, "--", "sh", "-c", "mkdir -p /w/sub && seq 1 100 > /w/n.txt && printf 'a.b\\naxb\\n' > /w/sub/dots.txt")

	code, out := call("ReadLines", map[string]any{"path": "/w/n.txt", "first_line": 10, "max_lines": 3})
	lines, _ := out["lines"].([]any)
	if code != 200 || len(lines) != 3 || lines[0].(map[string]any)["text_utf8"] != "10" || lines[2].(map[string]any)["text_utf8"] != "12" {
		t.Errorf("ReadLines 10-12: %d %v", code, out)
	}
	if tl := out["total_lines"]; tl != "100" && tl != 100.0 {
		t.Errorf("total_lines = %v, want 100", tl)
	}
	code, out = call("Grep", map[string]any{"pattern": "a.b", "path": "/w/sub", "literal": true})
	if m, _ := out["matches"].([]any); code != 200 || len(m) != 1 || m[0].(map[string]any)["text"] != "a.b" {
		t.Errorf("literal grep of a.b: %d %v", code, out)
	}
	code, out = call("Grep", map[string]any{"pattern": "a.b", "path": "/w/sub"})
	if m, _ := out["matches"].([]any); code != 200 || len(m) != 2 {
		t.Errorf("regexp grep of a.b: %d %v", code, out)
	}
	code, out = call("Glob", map[string]any{"pattern": "/w/**/*.txt", "info": true})
	entries, _ := out["entries"].([]any)
	if code != 200 || len(entries) != 2 {
		t.Fatalf("glob with info: %d %v", code, out)
	}
	e0 := entries[0].(map[string]any)
	if e0["path"] != "/w/n.txt" || e0["type"] != "FILE_TYPE_FILE" || (e0["size"] != "292" && e0["size"] != 292.0) || e0["mtime_unix_nano"] == nil {
		t.Errorf("glob entry: %v", e0)
	}
	code, out = call("EditFile", map[string]any{"path": "/w/sub/dots.txt", "old": "axb", "new": "edited"})
	if code != 200 || out["replacements"] != 1.0 {
		t.Errorf("EditFile: %d %v", code, out)
	}
	if got := s.must("sandbox", "exec", sb, "--", "cat", "/w/sub/dots.txt"); got != "a.b\nedited\n" {
		t.Errorf("after the edit: %q", got)
	}
	code, out = call("ReadLines", map[string]any{"path": "/w/sub"})
	if code != 400 || out["code"] != "invalid_argument" || !strings.Contains(out["message"].(string), "is a directory") {
		t.Errorf("ReadLines of a directory: %d %v", code, out)
	}
	code, out = call("Stat", map[string]any{"path": "/w/none"})
	if code != 404 || out["code"] != "not_found" {
		t.Errorf("Stat of a missing file: %d %v", code, out)
	}
}

// TestRunCommandOOM: a command past a memory-limited sandbox's limit. On
// runc the kernel kills the hog inside and the sandbox lives: reason
// oom_killed, exit 137, the kill counted. On gVisor the whole sandbox
// dies: the call fails saying so (out of memory, exit code 137), never
// with a bare broken stream.
func TestRunCommandOOM(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			s := startService(t)
			sb := s.create("--backend", backend, "--memory", "64M")
			c := reinsclient.New(s.url, s.token)
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			resp, err := c.Sandbox(sb).RunCommand(ctx, &reinsv1.RunCommandRequest{Command: "dd if=/dev/zero of=/dev/null bs=256M count=1"})
			if err != nil {
				code, _ := errdefs.ExitCode(err)
				if backend == "runc" || !errors.Is(err, errdefs.ErrFailedPrecondition) || code != 137 || !strings.Contains(err.Error(), "out of memory") {
					t.Fatalf("RunCommand of a memory hog: %v (exit code %d)", err, code)
				}
				return
			}
			if resp.Reason != "oom_killed" || resp.ExitCode != 137 || resp.OomKills < 1 {
				t.Errorf("RunCommand of a memory hog: %+v, want reason oom_killed, exit 137, oom_kills >= 1", resp)
			}
		})
	}
}
