package e2b

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/reinsdev/reins/api/e2b/envd/filesystem"
	"github.com/reinsdev/reins/api/e2b/envd/process"
)

// TestHostileEnvd: what a sandbox plants and what a caller sends cannot
// make the data plane touch the host or another tenant's sandbox.
func TestHostileEnvd(t *testing.T) {
	e := newEnvd(t)
	ctx := ctxT(t)

	t.Run("paths are the sandbox's", func(t *testing.T) {
		// A host directory with a secret; in the sandbox, a symlink to
		// where it is on the host, and paths climbing out with "..".
		hostDir := t.TempDir()
		if err := os.WriteFile(filepath.Join(hostDir, "secret"), []byte("host"), 0o600); err != nil {
			t.Fatal(err)
		}
		e.sh("ln -s " + hostDir + " /home/user/hostlink")
		for _, p := range []string{
			"/home/user/hostlink/secret",
			"../../../../../../" + hostDir + "/secret",
			hostDir + "/secret",
		} {
			_, err := e.fs.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: p}))
			var ce *connect.Error
			if err == nil || !errors.As(err, &ce) || (ce.Code() != connect.CodeNotFound && ce.Code() != connect.CodePermissionDenied) {
				t.Errorf("Stat %s = %v: the host's file was reached, or the error is not the sandbox's", p, err)
			}
			_, err = e.fs.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: filepath.Dir(p)}))
			if err == nil {
				t.Errorf("ListDir %s listed a directory that exists only on the host", filepath.Dir(p))
			}
		}
	})

	t.Run("signal outside the sandbox's processes", func(t *testing.T) {
		// pid 1 is the executor; a process a shell forked is not one
		// the executor started: neither can be named.
		pid := strings.TrimSpace(e.sh("sleep 300 > /dev/null 2>&1 & echo $!"))
		for _, p := range []string{"1", pid} {
			var n uint32
			fmt.Sscan(p, &n)
			_, err := e.proc.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{
				Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: n}}, Signal: process.Signal_SIGNAL_SIGKILL}))
			wantCode(t, err, connect.CodeNotFound, "not found")
		}
		if out := e.sh("kill -0 " + pid + " && echo alive"); out != "alive\n" {
			t.Errorf("the forked process was signalled: %q", out)
		}
		e.sh("kill " + pid)
	})

	t.Run("too many watchers", func(t *testing.T) {
		e.sh("mkdir -p /home/user/many")
		var ids []string
		for range maxWatchersPerSandbox {
			resp, err := e.fs.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "/home/user/many"}))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, resp.Msg.WatcherId)
		}
		_, err := e.fs.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "/home/user/many"}))
		wantCode(t, err, connect.CodeResourceExhausted, "watchers")
		for _, id := range ids {
			if _, err := e.fs.RemoveWatcher(ctx, connect.NewRequest(&filesystem.RemoveWatcherRequest{WatcherId: id})); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.fs.CreateWatcher(ctx, connect.NewRequest(&filesystem.CreateWatcherRequest{Path: "/home/user/many"})); err != nil {
			t.Errorf("after removing them, a watcher: %v", err)
		}
	})

	t.Run("another tenant's sandbox", func(t *testing.T) {
		if _, err := e.c.CreateTenant(ctx, "beta", nil); err != nil {
			t.Fatal(err)
		}
		betaToken, _, err := e.c.TenantToken(ctx, "beta")
		if err != nil {
			t.Fatal(err)
		}
		const missing = "sb-doesnotexist"
		answer := func(id string) string {
			// beta's own key, sealed for the sandbox as a create reply
			// would: what beta would hold had it guessed the id.
			tok := e.h.tokens.seal(id, betaToken)
			proc, fs := e.clients(id, tok)
			_, err1 := fs.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: "/"}))
			_, err2 := proc.List(ctx, connect.NewRequest(&process.ListRequest{}))
			resp, err := e.rawGet(id, tok, "/files?path=/etc/hostname")
			if err != nil {
				t.Fatal(err)
			}
			return strings.ReplaceAll(fmt.Sprint(err1, err2, resp), id, "ID")
		}
		if mine, missingOne := answer(e.sandbox), answer(missing); mine != missingOne {
			t.Errorf("another tenant's sandbox is answered\n  %s\nand a missing one\n  %s", mine, missingOne)
		}
		if got := answer(e.sandbox); !strings.Contains(got, "not found") || !strings.Contains(got, "404") {
			t.Errorf("another tenant's sandbox: %s, want not found and 404", got)
		}
	})

	t.Run("bad access token", func(t *testing.T) {
		proc, _ := e.clients(e.sandbox, "not-a-token")
		_, err := proc.List(ctx, connect.NewRequest(&process.ListRequest{}))
		wantCode(t, err, connect.CodeUnauthenticated, "")
		resp, err := e.rawGet(e.sandbox, "not-a-token", "/files?path=/etc/hostname")
		if err != nil || !strings.HasPrefix(resp, "401 ") {
			t.Errorf("GET /files with a bad token: %s, %v; want 401", resp, err)
		}
	})

	t.Run("too many multipart files", func(t *testing.T) {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		for i := range maxFileParts + 1 {
			w, _ := mw.CreateFormFile("file", fmt.Sprintf("/home/user/parts/%d", i))
			w.Write([]byte("x"))
		}
		mw.Close()
		req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/files", &body)
		req.Header.Set("Content-Type", mw.FormDataContentType())
		resp, err := e.httpClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var ee struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		json.NewDecoder(resp.Body).Decode(&ee)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || ee.Code != 413 || !strings.Contains(ee.Message, "at most") {
			t.Errorf("%d parts: %d %+v, want 413 saying at most %d", maxFileParts+1, resp.StatusCode, ee, maxFileParts)
		}
	})

	t.Run("malformed multipart", func(t *testing.T) {
		req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/files", strings.NewReader("--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/x\"\r\n\r\nno end"))
		req.Header.Set("Content-Type", "multipart/form-data; boundary=b")
		resp, err := e.httpClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("a malformed multipart body: %d, want 400", resp.StatusCode)
		}
	})

	t.Run("unimplemented calls", func(t *testing.T) {
		resp, err := e.rawGet(e.sandbox, e.token, "/envs")
		if err != nil || !strings.HasPrefix(resp, "501 ") || !strings.Contains(resp, "GET /envs") {
			t.Errorf("GET /envs: %s, %v; want 501 naming the call", resp, err)
		}
	})

	t.Run("a huge input", func(t *testing.T) {
		pid := e.startBackground(ctx, &process.StartRequest{Process: bash("cat > /dev/null"), Stdin: proto.Bool(true)})
		_, err := e.proc.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{
			Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}},
			Input:   &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: make([]byte, maxMessage+1)}}}))
		wantCode(t, err, connect.CodeResourceExhausted, "")
	})
}

// rawGet GETs path on the data plane with the access token, for sandbox id, and
// answers "STATUS BODY".
func (e *envd) rawGet(id, token, path string) (string, error) {
	req, err := http.NewRequest("GET", e.url+path, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set(SandboxIDHeader, id)
	req.Header.Set(AccessTokenHeader, token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return fmt.Sprintf("%d %s", resp.StatusCode, body), nil
}
