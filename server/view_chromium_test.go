package server

import (
	"context"
	"testing"
	"time"

	"github.com/reinsdev/reins/internal/cdp"
	"github.com/reinsdev/reins/internal/testenv"
)

// The view page works in a real browser: Chromium opens a signed link
// (its secret becomes a cookie, the page loads under the strict CSP), its
// <img> shows a frame of the stream, and its Take over button holds the
// screen. (test/e2e TestViewDesktop does the same on a real desktop.)
func TestViewInChromium(t *testing.T) {
	bin := testenv.RequiresBinary(t, "chromium", "chromium")
	e := newViewEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	page := e.ports.viewBase() + "/view/d1?" + viewLinkParam + "=" + e.viewLink(t, "d1", true, true)
	tab := cdp.Start(t, bin).Open(ctx, t, page)
	tab.WaitFor(ctx, t, 20*time.Second, "document.getElementById('screen').naturalWidth", "64")
	tab.WaitFor(ctx, t, 5*time.Second, "location.search", `""`)
	tab.WaitFor(ctx, t, 10*time.Second, "document.getElementById('takeover').hidden", "false")
	tab.Eval(ctx, t, "document.getElementById('takeover').click()")
	tab.WaitFor(ctx, t, 10*time.Second, "document.getElementById('holder').textContent", `"held by a link's viewer"`)
	if h, ok := e.srv.holds.Holding("d1"); !ok || h.By != "a link's viewer" {
		t.Errorf("after the page's Take over: %+v %v", h, ok)
	}
}
