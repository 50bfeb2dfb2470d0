// Package cdp drives a real headless Chromium from tests over the DevTools
// protocol: start it, open a tab, evaluate JavaScript in it. (Test helper:
// it fails the test on any error.)
package cdp

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"
)

// Browser is a headless Chromium with its own profile.
type Browser struct{ devtools string }

// Start runs Chromium (bin) headless with the flags that keep it off the
// network it would otherwise call, killed (its whole process group) when
// the test ends.
func Start(t *testing.T, bin string) *Browser {
	t.Helper()
	cmd := exec.Command(bin, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir="+t.TempDir(), "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "about:blank")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	found := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`DevTools listening on ws://([^/]+)/`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	select {
	case addr := <-found:
		return &Browser{devtools: addr}
	case <-time.After(30 * time.Second):
		t.Fatal("chromium did not start its DevTools server in 30s")
	}
	return nil
}

// Tab is one open page.
type Tab struct {
	ws *websocket.Conn
	id atomic.Int64
}

// Open opens a new tab at u.
func (b *Browser) Open(ctx context.Context, t *testing.T, u string) *Tab {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+b.devtools+"/json/new?"+url.QueryEscape(u), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var target struct {
		WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&target); err != nil || target.WebSocketDebuggerURL == "" {
		t.Fatalf("a new tab: %v %+v", err, target)
	}
	ws, _, err := websocket.Dial(ctx, target.WebSocketDebuggerURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(16 << 20)
	t.Cleanup(func() { ws.CloseNow() })
	return &Tab{ws: ws}
}

// Eval runs expr in the tab and returns its value as JSON.
func (tab *Tab) Eval(ctx context.Context, t *testing.T, expr string) json.RawMessage {
	t.Helper()
	id := tab.id.Add(1)
	if err := wsjson.Write(ctx, tab.ws, map[string]any{"id": id, "method": "Runtime.evaluate",
		"params": map[string]any{"expression": expr, "returnByValue": true}}); err != nil {
		t.Fatal(err)
	}
	for {
		var msg struct {
			ID     int64 `json:"id"`
			Result struct {
				Result struct {
					Value json.RawMessage `json:"value"`
				} `json:"result"`
			} `json:"result"`
			Error json.RawMessage `json:"error"`
		}
		if err := wsjson.Read(ctx, tab.ws, &msg); err != nil {
			t.Fatalf("devtools: %v", err)
		}
		if msg.ID != id {
			continue
		}
		if msg.Error != nil {
			t.Fatalf("evaluate %s: %s", expr, msg.Error)
		}
		return msg.Result.Result.Value
	}
}

// WaitFor evaluates expr until its JSON value is want, for at most d.
func (tab *Tab) WaitFor(ctx context.Context, t *testing.T, d time.Duration, expr, want string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		got := string(tab.Eval(ctx, t, expr))
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %s after %s, want %s (page: %s)", expr, got, d, want,
				tab.Eval(ctx, t, "document.body ? document.body.innerText.slice(0, 500) : ''"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
