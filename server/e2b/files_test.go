package e2b

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
)

// files sends a /files request and answers its status and body.
func (e *envd) files(method, query, contentType string, body io.Reader) (int, http.Header, []byte) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(ctxT(e.t), method, e.url+"/files?"+query, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := e.httpClient().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, data
}

func TestFiles(t *testing.T) {
	e := newEnvd(t)

	// One file as the body; a relative path is under user's home.
	code, _, body := e.files("POST", "path=raw.txt", "application/octet-stream", strings.NewReader("raw bytes"))
	var written []writtenEntry
	if json.Unmarshal(body, &written); code != 200 || len(written) != 1 || written[0] != (writtenEntry{Name: "raw.txt", Type: "file", Path: "/home/user/raw.txt"}) {
		t.Fatalf("POST octet-stream: %d %s", code, body)
	}
	// Two files as multipart parts, named by their filenames, in a
	// directory made for them.
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	for name, content := range map[string]string{"/home/user/new/a.txt": "aaa", "/home/user/new/b.txt": "bbb"} {
		w, _ := mw.CreateFormFile("file", name)
		w.Write([]byte(content))
	}
	mw.Close()
	code, _, body = e.files("POST", "", mw.FormDataContentType(), &mp)
	written = nil
	if json.Unmarshal(body, &written); code != 200 || len(written) != 2 {
		t.Fatalf("POST multipart: %d %s", code, body)
	}

	for p, want := range map[string]string{"raw.txt": "raw bytes", "/home/user/new/a.txt": "aaa", "/home/user/new/b.txt": "bbb"} {
		code, hdr, got := e.files("GET", "path="+p, "", nil)
		if code != 200 || string(got) != want || !strings.Contains(hdr.Get("Content-Disposition"), "attachment") {
			t.Errorf("GET %s: %d %q %v, want %q", p, code, got, hdr, want)
		}
	}
	// Written as envd writes: the user's files, which its commands may change.
	if out := e.sh("stat -c %U /home/user/raw.txt /home/user/new /home/user/new/a.txt && echo more >> /home/user/raw.txt && cat /home/user/raw.txt"); out != "user\nuser\nuser\nraw bytesmore\n" {
		t.Errorf("the written files as user: %q", out)
	}

	for _, tc := range []struct {
		query string
		code  int
		says  string
	}{
		{"path=/home/user/nope", 404, "/home/user/nope"},
		{"path=/home/user/new", 400, "directory"},
		{"", 400, "path"},
		{"path=/etc/hostname&username=nobody", 401, "nobody"},
	} {
		code, _, body := e.files("GET", tc.query, "", nil)
		var ee struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if json.Unmarshal(body, &ee); code != tc.code || ee.Code != tc.code || !strings.Contains(ee.Message, tc.says) {
			t.Errorf("GET /files?%s: %d %s, want %d saying %q", tc.query, code, body, tc.code, tc.says)
		}
	}
	if code, _, _ := e.files("GET", "path=/etc/hostname", "", nil); code != 200 {
		t.Errorf("GET /files of a root file as user: %d", code)
	}
	// GET /health answers 204 with nothing.
	req, _ := http.NewRequest("GET", e.url+"/health", nil)
	resp, err := e.httpClient().Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Errorf("GET /health: %v, %v", resp, err)
	}
}
