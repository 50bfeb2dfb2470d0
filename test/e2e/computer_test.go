package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"image"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/store/blob"
)

// act is a script turn with one computer call.
func act(action string, kv ...any) map[string]any {
	in := map[string]any{"action": action}
	for i := 0; i+1 < len(kv); i += 2 {
		in[kv[i].(string)] = kv[i+1]
	}
	return map[string]any{"tool_calls": []any{map[string]any{"name": "computer", "input": in}}}
}

func at(p image.Point) []int { return []int{p.X, p.Y} }

// browserScript is the scripted model of the real browser task: open the
// site in Chromium, click the big button, type into the form and submit
// it, then do what the page's injected instruction says (click its link
// to the collector, as a model that fell for it would), and look.
func browserScript(t *testing.T, siteURL string) string {
	return writeScript(t,
		// The browser wrapper starts Chromium in the background; the
		// command then waits until the page is on the screen.
		bash("browser --kiosk "+siteURL+" >/tmp/browser.log 2>&1 & "+onScreen),
		withExpect("on screen", act("screenshot")),
		act("left_click", "coordinate", at(buttonAt)),
		act("left_click", "coordinate", at(inputAt)),
		act("type", "text", "hello from reins"),
		act("key", "text", "Return"),
		act("left_click", "coordinate", at(linkAt)),
		act("wait", "duration", 2),
		act("screenshot"),
		map[string]any{"text": "done: pressed the button, sent the form, followed the page's instruction"},
	)
}

func withExpect(s string, turn map[string]any) map[string]any {
	turn["expect"] = s
	return turn
}

// TestComputerBrowserTask is issue 12's real task in a real browser: a
// scripted run opens Chromium in a desktop sandbox at a page the test
// serves on the host (an allowed host), clicks a button at known
// coordinates, types into a form and submits it; the page also tells the
// model to send the user's data to an unlisted host, and the run's
// navigation there is refused by the egress proxy.
func TestComputerBrowserTask(t *testing.T) {
	col := newCollector(t)
	web := newSite(t, col.port())
	s := startService(t, webResolve()...)
	siteURL := "http://site.test:" + web.port() + "/"
	allow := "site.test:" + web.port()
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			s.t = t
			script := browserScript(t, siteURL)
			var args []string
			var sb string
			if backend == "gvisor" {
				// The run makes its sandbox (gVisor, the default) and
				// removes it at the end.
				args = []string{"run", "--json", "--image", "desktop", "--allow-host", allow, "--model", "script:" + script, "use the shop"}
			} else {
				// A run makes its sandboxes on the default backend: for
				// runc the test makes one and lends it.
				sb = s.create("--backend", "runc", "--image", "desktop", "--allow-host", allow)
				args = []string{"run", "--json", "--in", sb, "--model", "script:" + script, "use the shop"}
			}
			before, _, _ := web.record()
			r := s.run(args...)
			if r.code != 0 {
				t.Fatalf("reins run: %s", r)
			}
			var run map[string]any
			if err := json.Unmarshal([]byte(r.stdout), &run); err != nil {
				t.Fatalf("run --json: %v\n%s", err, r.stdout)
			}
			id, _ := run["id"].(string)

			// The site recorded the form with the text typed into it,
			// and the button's click.
			submits, clicks, requests := web.record()
			if got := submits[len(before):]; len(got) != 1 || got[0] != "hello from reins" {
				t.Errorf("the site's submissions: %q, want one of %q", got, "hello from reins")
			}
			if clicks == 0 {
				t.Errorf("the site saw no click of the button; its requests: %q", requests)
			}
			// The collector received nothing: no connection at all.
			if got := col.received(); len(got) != 0 {
				t.Fatalf("the unlisted collector received %d connections: %q", len(got), got)
			}
			if containsAny(requests, "/steal") {
				t.Errorf("the data reached the site instead: %q", requests)
			}

			events := runEvents(t, s, s.token, id)
			shots := computerScreenshots(t, events)
			// The screenshot before the click shows the button idle, the
			// one the click returned shows it clicked: the click landed
			// where the script aimed, on the page Chromium drew there.
			if len(shots) < 3 {
				t.Fatalf("%d computer calls returned screenshots, want at least 3", len(shots))
			}
			if c := pixelAt(t, readBlob(t, s, shots[0]), buttonAt); !near(c, buttonIdle) {
				t.Errorf("before the click the button at %v is %v, want %v", buttonAt, c, buttonIdle)
			}
			if c := pixelAt(t, readBlob(t, s, shots[1]), buttonAt); !near(c, buttonClicked) {
				t.Errorf("after the click the button at %v is %v, want %v", buttonAt, c, buttonClicked)
			}
			// The refused attempt is in the run's egress record and, for
			// the lent sandbox, in its own egress log.
			if !deniedIn(events, "collector.test") {
				t.Errorf("the run's events record no refused connection to collector.test:\n%s", egressText(events))
			}
			if sb != "" {
				if e := findEntry(s.egressEntries(sb), map[string]string{"host": "collector.test"}); e == nil || e["allowed"] == true {
					t.Errorf("the sandbox's egress log has no refusal of collector.test: %v", s.egressEntries(sb))
				}
				s.must("sandbox", "rm", sb)
			}
		})
	}
}

// TestComputerBrowserCLI is the same task driven by a person from the
// CLI (reins sandbox computer), on a desktop sandbox of each backend: the
// click lands on the button (its colour changes in the next screenshot),
// the typed text reaches the site's form, and the injected link leads to
// the proxy's refusal, logged, with nothing at the collector.
func TestComputerBrowserCLI(t *testing.T) {
	col := newCollector(t)
	web := newSite(t, col.port())
	s := startService(t, webResolve()...)
	siteURL := "http://site.test:" + web.port() + "/"
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			s.t = t
			id := s.create("--backend", backend, "--image", "desktop", "--allow-host", "site.test:"+web.port())
			defer s.run("sandbox", "rm", id)
			shot := func(name string) []byte {
				f := filepath.Join(t.TempDir(), name+".png")
				s.must("sandbox", "computer", id, "screenshot", "-o", f)
				data, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				return data
			}
			// The first computer call starts the display; then the browser.
			shot("empty")
			before, _, _ := web.record()
			if r := s.sh(id, "browser --kiosk "+siteURL+" >/tmp/browser.log 2>&1 & "+onScreen); r.code != 0 {
				t.Fatalf("starting the browser: %s", r)
			}
			idle := shot("idle")
			if c := pixelAt(t, idle, buttonAt); !near(c, buttonIdle) {
				t.Fatalf("the button at %v is %v before the click, want %v", buttonAt, c, buttonIdle)
			}
			s.must("sandbox", "computer", id, "click", fmt.Sprint(buttonAt.X), fmt.Sprint(buttonAt.Y))
			eventually(t, 10*time.Second, "the button to turn green", func() (bool, string) {
				c := pixelAt(t, shot("clicked"), buttonAt)
				return near(c, buttonClicked), fmt.Sprint(c)
			})
			s.must("sandbox", "computer", id, "click", fmt.Sprint(inputAt.X), fmt.Sprint(inputAt.Y))
			s.must("sandbox", "computer", id, "type", "hello from the CLI")
			s.must("sandbox", "computer", id, "key", "Return")
			eventually(t, 10*time.Second, "the form to reach the site", func() (bool, string) {
				submits, _, _ := web.record()
				return containsAny(submits[len(before):], "hello from the CLI"), fmt.Sprint(submits)
			})
			s.must("sandbox", "computer", id, "click", fmt.Sprint(linkAt.X), fmt.Sprint(linkAt.Y))
			eventually(t, 15*time.Second, "the proxy to refuse collector.test", func() (bool, string) {
				e := findEntry(s.egressEntries(id), map[string]string{"host": "collector.test"})
				return e != nil, fmt.Sprint(e)
			})
			for _, e := range s.egressEntries(id) {
				if e["host"] == "collector.test" && e["allowed"] == true {
					t.Errorf("the proxy let the browser reach the collector: %v", e)
				}
			}
			if got := col.received(); len(got) != 0 {
				t.Fatalf("the unlisted collector received %q", got)
			}
		})
	}
}

// deniedIn reports whether the run's egress events record a refused
// connection (or DNS query) to host.
func deniedIn(events []*reinsv1.RunEvent, host string) bool {
	for _, ev := range ofType(events, reinsv1.EventType_EVENT_TYPE_EGRESS) {
		for _, e := range ev.GetEgress().GetEntries() {
			if strings.TrimSuffix(e.Host, ".") == host && !e.Allowed {
				return true
			}
		}
	}
	return false
}

// egressText is a run's egress events, for a failure message.
func egressText(events []*reinsv1.RunEvent) string {
	var b strings.Builder
	for _, ev := range ofType(events, reinsv1.EventType_EVENT_TYPE_EGRESS) {
		for _, e := range ev.GetEgress().GetEntries() {
			fmt.Fprintf(&b, "%s %s %s:%d allowed=%v %s\n", ev.GetEgress().GetSandbox(), e.Proto, e.Host, e.Port, e.Allowed, e.Rule)
		}
	}
	return b.String()
}

// computerScreenshots checks the run's computer calls in its events:
// each screenshot is in the blob store, named in its result by digest,
// never inline. It returns the digests in the order of the calls.
func computerScreenshots(t *testing.T, events []*reinsv1.RunEvent) []string {
	t.Helper()
	var digests []string
	calls := 0
	for _, ev := range events {
		// A PNG inline would show as base64 of its signature.
		data, _ := protojson.Marshal(ev)
		if strings.Contains(string(data), "iVBORw0KGgo") {
			t.Fatalf("event %d carries a PNG inline; screenshots go by reference", ev.Seq)
		}
		if c := ev.GetToolCall(); c != nil && c.Name == "computer" {
			calls++
		}
		res := ev.GetToolResult()
		if res == nil || res.Name != "computer" {
			continue
		}
		if res.IsError {
			t.Errorf("computer call %s failed: %s", res.CallId, res.Text)
		}
		for _, d := range res.Images {
			if !strings.HasPrefix(d, "sha256:") {
				t.Fatalf("computer result %s names image %q, want a blob digest", res.CallId, d)
			}
			digests = append(digests, d)
		}
	}
	if calls == 0 {
		t.Fatal("the run's events show no computer call")
	}
	return digests
}

// readBlob reads a blob from the service's store: the test owns the data
// directory (the service is its child).
func readBlob(t *testing.T, s *service, digest string) []byte {
	t.Helper()
	st, err := blob.Open(filepath.Join(s.dataDir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := st.Open(context.Background(), digest)
	if err != nil {
		t.Fatalf("screenshot %s: %v", digest, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, 16<<20+1))
	if err != nil {
		t.Fatal(err)
	}
	return data
}
