package sandboxtool_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/api/reins/executor/v1/executorv1connect"
	"github.com/reinsdev/reins/executor/client"
	"github.com/reinsdev/reins/tool"
	"github.com/reinsdev/reins/tool/sandboxtool"
)

// counting is the real client, counting the computer calls that reach
// the executor.
type counting struct {
	*client.Client
	n atomic.Int32
}

func (c *counting) Computer(ctx context.Context, req *executorv1.ComputerRequest) (*executorv1.ComputerResponse, error) {
	c.n.Add(1)
	return c.Client.Computer(ctx, req)
}

// TestHostileComputerArgs: arguments a model got wrong (or was steered
// into) are refused in words before anything reaches the executor.
func TestHostileComputerArgs(t *testing.T) {
	b := newBox(t)
	cx := &counting{Client: b.cl}
	sb := b.sandbox("k")
	sb.Exec = cx
	for _, c := range []struct {
		input string
		says  string
	}{
		{`{"action":"left_click","coordinate":["10","20"]}`, "coordinate must be [x, y], two integers"},
		{`{"action":"left_click","coordinate":[10]}`, "coordinate must have 2 integers, not 1"},
		{`{"action":"left_click","coordinate":[-1,5]}`, "off the screen"},
		{`{"action":"left_click","coordinate":[10.5,5]}`, "two integers"},
		{`{"action":"type","text":"` + strings.Repeat("a", 100_000) + `"}`, "text is 100000 bytes"},
		{`{"action":"key","text":"` + strings.Repeat("a", 1000) + `"}`, "at most 256"},
		{`{"action":"zoom","region":[1,2,3]}`, "region must have 4 integers, not 3"},
		{`{"action":"zoom","region":[5,5,5,9]}`, "is empty"},
		{`{"action":"zoom"}`, "zoom needs region"},
		{`{"action":"format_disk"}`, `unknown action "format_disk": use one of screenshot, left_click`},
		{`{"coordinate":[1,2]}`, `unknown action ""`},
		{`{"action":7}`, "action must be a string"},
		{`{"action":"wait","duration":1e9}`, "duration must be a number of seconds from 0 to 100"},
		{`{"action":"wait"}`, "wait needs duration"},
		{`{"action":"hold_key","text":"shift"}`, "hold_key needs duration"},
		{`{"action":"scroll","scroll_direction":"sideways"}`, `scroll_direction "sideways"`},
		{`{"action":"scroll","scroll_direction":"up","scroll_amount":100000}`, "scroll_amount must be"},
		{`{"action":"mouse_move"}`, "mouse_move needs coordinate"},
		{`{"action":"left_click_drag","coordinate":[1,1]}`, "needs start_coordinate and coordinate"},
		{`["screenshot"]`, "not a JSON object"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := find(t, "computer").Run(ctx, sb, json.RawMessage(c.input))
		cancel()
		if err != nil {
			t.Errorf("%.80s: %v", c.input, err)
			continue
		}
		wantText(t, res, true, c.says, "nothing was done")
	}
	if n := cx.n.Load(); n != 0 {
		t.Errorf("%d bad calls reached the executor", n)
	}
	// A good call does reach it (and this executor has no display: its
	// words come back).
	res, err := find(t, "computer").Run(context.Background(), sb, json.RawMessage(`{"action":"screenshot"}`))
	if err != nil {
		t.Fatal(err)
	}
	wantText(t, res, true, "has no display", "--image desktop")
	if cx.n.Load() != 1 {
		t.Errorf("the good call did not reach the executor")
	}
}

// liar is an executor that answers computer calls with what png says.
type liar struct {
	executorv1connect.UnimplementedExecutorHandler
	png           func() []byte
	width, height uint32
}

func (l *liar) Computer(context.Context, *connect.Request[executorv1.ComputerRequest]) (*connect.Response[executorv1.ComputerResponse], error) {
	return connect.NewResponse(&executorv1.ComputerResponse{Png: l.png(), Width: l.width, Height: l.height, ScreenWidth: l.width, ScreenHeight: l.height}), nil
}

func serveLiar(t *testing.T, l *liar) *client.Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "liar.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	_, h := executorv1connect.NewExecutorHandler(l)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: h, Protocols: &p}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	cl, err := client.Dial(context.Background(), sock, "tok", client.WithCallTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// pngHeader is the start of a PNG of w×h followed by n bytes of junk.
func pngHeader(w, h uint32, n int) []byte {
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR")
	binary.Write(&b, binary.BigEndian, [2]uint32{w, h})
	b.Write(make([]byte, n))
	return b.Bytes()
}

// TestHostileComputerAnswer: a sandbox answering a screenshot with 100 MB,
// with something that is not a PNG, or with a PNG whose header claims a
// huge image, costs the service a bounded read and the model an error in
// words; no image is handed on.
func TestHostileComputerAnswer(t *testing.T) {
	for _, c := range []struct {
		name string
		l    *liar
		says string
	}{
		{"100MB", &liar{png: func() []byte { return pngHeader(1280, 800, 100<<20) }, width: 1280, height: 800}, "over the size limit"},
		{"12MB", &liar{png: func() []byte { return pngHeader(1280, 800, 12<<20) }, width: 1280, height: 800}, "over the limit of 8 MiB"},
		{"not a png", &liar{png: func() []byte { return []byte("GIF89a, surely") }, width: 1280, height: 800}, "not a PNG"},
		{"huge header", &liar{png: func() []byte { return pngHeader(100000, 100000, 64) }, width: 100000, height: 100000}, "outside 1..4096"},
		{"size mismatch", &liar{png: func() []byte { return pngHeader(640, 400, 64) }, width: 1280, height: 800}, "not the 1280x800"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := serveLiar(t, c.l)
			sb := sandboxtool.Sandbox{Exec: cl, Key: "k", Name: "main", Screen: "1280x800"}
			res, err := find(t, "computer").Run(context.Background(), sb, json.RawMessage(`{"action":"screenshot"}`))
			if err != nil {
				t.Fatal(err)
			}
			wantText(t, res, true, c.says)
			if len(res.Images) != 0 {
				t.Errorf("an image of %d bytes was handed on", len(res.Images[0]))
			}
		})
	}
}

// TestCheckPNG: the header check refuses before anything decodes.
func TestCheckPNG(t *testing.T) {
	if w, h, err := tool.CheckPNG(pngHeader(1024, 768, 10)); err != nil || w != 1024 || h != 768 {
		t.Errorf("a good header: %d %d %v", w, h, err)
	}
	for _, b := range [][]byte{nil, []byte("\x89PNG"), pngHeader(0, 10, 0), pngHeader(5000, 10, 0)} {
		if _, _, err := tool.CheckPNG(b); err == nil {
			t.Errorf("%q accepted", b)
		}
	}
}
