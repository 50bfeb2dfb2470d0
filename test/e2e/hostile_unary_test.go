package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/reinsdev/reins/errdefs"
)

// rawGet reads a raw file through the service: status, body, kind.
func rawGet(t *testing.T, s *service, id, p string) (int, []byte, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.url+rawRoute(id, p), nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", p, err)
	}
	return resp.StatusCode, body, resp.Header.Get(errdefs.KindHeader)
}

func rawPut(t *testing.T, s *service, id, p string, body io.Reader, size int64) (int, map[string]any, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, s.url+rawRoute(id, p), body)
	req.ContentLength = size
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]any{}
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out, resp.Header.Get(errdefs.KindHeader)
}

// TestHostileRawFileSymlinks: the sandbox plants symbolic links to host
// files (a secret the test made, the host's /etc/shadow) where the raw
// file routes will read and write. Paths resolve inside the sandbox: the
// host's files are neither returned nor changed, on the staged path
// (gVisor) and over the socket (runc). A host that opened the link's
// target itself would return the secret.
func TestHostileRawFileSymlinks(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(secret, []byte("the host's secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	shadow, _ := os.ReadFile("/etc/shadow")
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			s := startService(t)
			sb := s.create("--backend", backend)
			s.must("sandbox", "exec", sb, "--", "sh", "-c", fmt.Sprintf(
				"mkdir -p /w && ln -s %s /w/to-secret && ln -s /etc/shadow /w/to-shadow && ln -s ../../../../../..%s /w/up-secret && ln -s %s /w/put-secret",
				secret, secret, secret))
			for _, p := range []string{"/w/to-secret", "/w/up-secret", secret} {
				code, body, _ := rawGet(t, s, sb, p)
				if bytes.Contains(body, []byte("the host's secret")) {
					t.Fatalf("GET %s returned the host's file", p)
				}
				if code != http.StatusNotFound {
					t.Errorf("GET %s (a link to a host file the sandbox has not): %d %s, want 404", p, code, body)
				}
			}
			inside := s.run("sandbox", "exec", sb, "--", "cat", "/etc/shadow").stdout
			code, body, _ := rawGet(t, s, sb, "/w/to-shadow")
			if len(shadow) > 0 && bytes.Equal(body, shadow) && inside != string(shadow) {
				t.Fatalf("GET /w/to-shadow returned the host's /etc/shadow")
			}
			if code == http.StatusOK && string(body) != inside {
				t.Errorf("GET /w/to-shadow: %q, the sandbox's /etc/shadow is %q", body, inside)
			}
			code, out, _ := rawPut(t, s, sb, "/w/put-secret", strings.NewReader("overwritten\n"), 12)
			if data, _ := os.ReadFile(secret); string(data) != "the host's secret\n" {
				t.Fatalf("PUT through a link to a host file changed it: %q (%d %v)", data, code, out)
			}
		})
	}
}

// TestHostileRawFileDirectory: a directory named as the file to read or
// replace is refused with the is_directory kind (HTTP 400), in words,
// and the directory is left as it was.
func TestHostileRawFileDirectory(t *testing.T) {
	s := startService(t)
	sb := s.create("--backend", "gvisor")
	s.must("sandbox", "exec", sb, "--", "sh", "-c", "mkdir -p /w/d && echo kept > /w/d/f && ln -s /w/d /w/link-to-dir")
	for _, p := range []string{"/w/d", "/w/link-to-dir", "/", "/w/d/"} {
		code, body, kind := rawGet(t, s, sb, p)
		if code != 400 || kind != "is_directory" || !bytes.Contains(body, []byte("is a directory")) {
			t.Errorf("GET %s: %d %s %s, want 400 is_directory", p, code, kind, body)
		}
		code, out, kind := rawPut(t, s, sb, p, strings.NewReader("x"), 1)
		if code != 400 || kind != "is_directory" || !strings.Contains(fmt.Sprint(out["message"]), "is a directory") {
			t.Errorf("PUT %s: %d %s %v, want 400 is_directory", p, code, kind, out)
		}
	}
	if out := s.must("sandbox", "exec", sb, "--", "cat", "/w/d/f"); out != "kept\n" {
		t.Errorf("the directory's file after the refused writes: %q", out)
	}
}

// TestHostileRawFileFillsDisk: a PUT larger than the sandbox's disk fails
// as no_space (HTTP 507) and leaves no partial file, no temporary file
// and nothing staged; the file it would have replaced is unchanged.
func TestHostileRawFileFillsDisk(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			s := startService(t)
			sb := s.create("--backend", backend, "--disk", "32M")
			s.must("sandbox", "exec", sb, "--", "sh", "-c", "mkdir -p /w && echo original > /w/f")
			const size = 100 << 20
			code, out, kind := rawPut(t, s, sb, "/w/f", io.LimitReader(&pattern{}, size), size)
			if code != http.StatusInsufficientStorage || kind != "no_space" || !strings.Contains(fmt.Sprint(out["message"]), "disk") {
				t.Errorf("PUT of 100 MiB into a 32 MiB disk: %d %s %v, want 507 no_space", code, kind, out)
			}
			left := s.must("sandbox", "exec", sb, "--", "sh", "-c", "cat /w/f; ls -A /w; ls -A /.reins/xfer 2>/dev/null | wc -l")
			if left != "original\nf\n0\n" {
				t.Errorf("after the failed PUT: %q, want the original file alone and nothing staged", left)
			}
			// The disk is usable again: nothing holds the space.
			if code, out, _ := rawPut(t, s, sb, "/w/g", io.LimitReader(&pattern{}, 8<<20), 8<<20); code != 200 {
				t.Errorf("an 8 MiB PUT after the failed one: %d %v", code, out)
			}
		})
	}
}

// TestHostileRawFileLyingLength: a PUT whose body ends before its
// Content-Length (the connection closed mid-body) writes nothing: the
// file it named keeps its old content and no temporary file is left.
func TestHostileRawFileLyingLength(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			s := startService(t)
			sb := s.create("--backend", backend)
			if code, out, _ := rawPut(t, s, sb, "/w/f", strings.NewReader("original\n"), 9); code != 200 {
				t.Fatalf("first PUT: %d %v", code, out)
			}
			conn, err := net.Dial("tcp", s.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "PUT %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 1000000\r\n\r\n", rawRoute(sb, "/w/f"), s.token)
			conn.Write(bytes.Repeat([]byte("short "), 1000))
			conn.(*net.TCPConn).CloseWrite()
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode == 200 {
					t.Errorf("a body shorter than its Content-Length was taken: %s", body)
				}
			}
			left := s.must("sandbox", "exec", sb, "--", "sh", "-c", "cat /w/f; ls -A /w")
			if left != "original\nf\n" {
				t.Errorf("after the short body: %q, want the original file alone", left)
			}
		})
	}
}

// serviceRSS is reins serve's resident memory and its peak, in bytes.
func serviceRSS(t *testing.T, s *service) (rss, peak int64) {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = n << 10
		case "VmHWM:":
			peak = n << 10
		}
	}
	return rss, peak
}

// TestHostileRunCommandSpew: commands that write output as fast as they
// can until their timeout are answered with the first MiB of each
// stream, truncated, and the service's peak memory does not grow with
// what they wrote (several at once). Without the cap each answer would
// hold everything the command wrote.
func TestHostileRunCommandSpew(t *testing.T) {
	s := startService(t)
	sb := s.create("--backend", "runc")
	p := plain{t, s.url, s.token}
	p.call(runCommandRoute, map[string]any{"sandbox_id": sb, "command": "true"}) // warm
	_, before := serviceRSS(t, s)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var outs []map[string]any
	for range 3 {
		wg.Go(func() {
			code, out := p.call(runCommandRoute, map[string]any{"sandbox_id": sb, "timeout_ms": 4000,
				"command": "yes spew-spew-spew-spew-spew-spew & yes err-err-err-err-err >&2"})
			mu.Lock()
			defer mu.Unlock()
			out["status"] = code
			outs = append(outs, out)
		})
	}
	wg.Wait()
	for _, out := range outs {
		so, _ := out["stdout"].(string)
		se, _ := out["stderr"].(string)
		if out["status"] != 200 || len(so) != 1<<20 || len(se) != 1<<20 || out["truncated"] != true || out["reason"] != "timeout" {
			t.Errorf("spew: status %v, %d and %d bytes, truncated %v, reason %v", out["status"], len(so), len(se), out["truncated"], out["reason"])
		}
	}
	_, after := serviceRSS(t, s)
	t.Logf("service peak RSS: %d MiB before, %d MiB after three 4 s spews", before>>20, after>>20)
	if after-before > 96<<20 {
		t.Errorf("the service's peak memory grew by %d MiB during the spews", (after-before)>>20)
	}
}

// TestHostileHugeJSON: JSON requests far past the API's 16 MiB bound (a
// RunCommand's stdin, an executor WriteFile for JSON callers) are
// refused as resource_exhausted, and the service serves on.
func TestHostileHugeJSON(t *testing.T) {
	s := startService(t)
	sb := s.create("--backend", "gvisor")
	p := plain{t, s.url, s.token}
	huge := strings.Repeat("A", 40<<20)
	for _, c := range []struct{ route, body string }{
		{runCommandRoute, `{"sandbox_id":"` + sb + `","command":"cat","stdin":"` + huge + `"}`},
		{"/reins.executor.v1.Executor/WriteFile", `{"path":"/w/huge","data":"` + huge + `"}`},
	} {
		code, out := p.do(http.MethodPost, c.route, "application/json", strings.NewReader(c.body), http.Header{"Reins-Sandbox": {sb}})
		if code == 200 || out["code"] != "resource_exhausted" {
			t.Errorf("%s with a 40 MiB body: %d %v, want resource_exhausted", c.route, code, out)
		}
	}
	if code, out := p.call(runCommandRoute, map[string]any{"sandbox_id": sb, "command": "echo still"}); code != 200 || out["stdout"] != "still\n" {
		t.Errorf("after the huge requests: %d %v", code, out)
	}
}
