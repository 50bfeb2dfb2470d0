package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"

	"github.com/reinsdev/reins/internal/testenv"
)

// The view page works in a real browser: Chromium opens a signed link
// (its secret becomes a cookie, the page loads under the strict CSP), its
// <img> shows a frame of the stream, and its Take over button holds the
// screen.
func TestViewInChromium(t *testing.T) {
	bin := testenv.RequiresBinary(t, "chromium", "chromium")
	e := newViewEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	link := e.viewLink(t, "d1", true, true)
	page := e.ports.viewBase() + "/view/d1?" + viewLinkParam + "=" + link

	b := startChromium(t, bin)
	tab := b.open(ctx, t, page)
	defer tab.CloseNow()
	eval := func(expr string) json.RawMessage { return evaluate(ctx, t, tab, expr) }
	waitFor := func(what, expr, want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			got := string(eval(expr))
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Logf("frames sent %d, shots %d", e.srv.viewFramesSent.Load(), e.exec.shots.Load())
				t.Logf("page: %s", eval("document.body.innerHTML.slice(0, 2000) + ' @ ' + location.href"))
				t.Fatalf("%s: %s is %s, want %s", what, expr, got, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitFor("a frame in the <img>", "document.getElementById('screen').naturalWidth", "64")
	waitFor("the link out of the address bar", "location.search", `""`)
	waitFor("the take-over button", "document.getElementById('takeover').hidden", "false")
	eval("document.getElementById('takeover').click()")
	for {
		if h, ok := e.srv.holds.Holding("d1"); ok {
			if h.By != "a link's viewer" {
				t.Errorf("held by %q", h.By)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the page's Take over did not hold the screen")
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitFor("the holder shown", "document.getElementById('holder').textContent", `"held by a link's viewer"`)
}

type chromium struct{ devtools string }

// startChromium runs headless Chromium with its own profile, killed (its
// whole process group) when the test ends.
func startChromium(t *testing.T, bin string) *chromium {
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
		return &chromium{devtools: addr}
	case <-time.After(30 * time.Second):
		t.Fatal("chromium did not start its DevTools server in 30s")
	}
	return nil
}

// open opens a new tab at u and connects to it.
func (c *chromium) open(ctx context.Context, t *testing.T, u string) *websocket.Conn {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+c.devtools+"/json/new?"+url.QueryEscape(u), nil)
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
	return ws
}

var cdpID int

// evaluate runs expr in the tab and returns its value as JSON.
func evaluate(ctx context.Context, t *testing.T, ws *websocket.Conn, expr string) json.RawMessage {
	t.Helper()
	cdpID++
	id := cdpID
	if err := wsjson.Write(ctx, ws, map[string]any{"id": id, "method": "Runtime.evaluate",
		"params": map[string]any{"expression": expr, "returnByValue": true}}); err != nil {
		t.Fatal(err)
	}
	for {
		var msg struct {
			ID     int `json:"id"`
			Result struct {
				Result struct {
					Value json.RawMessage `json:"value"`
				} `json:"result"`
			} `json:"result"`
			Error json.RawMessage `json:"error"`
		}
		if err := wsjson.Read(ctx, ws, &msg); err != nil {
			t.Fatalf("devtools: %v", err)
		}
		if msg.ID != id {
			continue
		}
		if msg.Error != nil {
			t.Fatal(fmt.Sprintf("evaluate %s: %s", expr, msg.Error))
		}
		return msg.Result.Result.Value
	}
}
