package main

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
)

// Each form of the issue becomes the executor's action; the CLI's
// click --button right is right_click, down --button middle is
// left_mouse_down with the button, key --hold is hold_key.
func TestComputerRequest(t *testing.T) {
	pt := func(x, y int32) *executorv1.Point { return &executorv1.Point{X: x, Y: y} }
	for _, tc := range []struct {
		action string
		args   []string
		f      computerFlags
		want   *executorv1.ComputerRequest
	}{
		{"screenshot", nil, computerFlags{scale: "640x400"}, &executorv1.ComputerRequest{Action: "screenshot", ScaleWidth: 640, ScaleHeight: 400}},
		{"click", []string{"10", "20"}, computerFlags{}, &executorv1.ComputerRequest{Action: "left_click", Coordinate: pt(10, 20)}},
		{"click", []string{"10", "20"}, computerFlags{button: "right"}, &executorv1.ComputerRequest{Action: "right_click", Coordinate: pt(10, 20)}},
		{"click", []string{"10", "20"}, computerFlags{button: "middle", screenshot: true}, &executorv1.ComputerRequest{Action: "middle_click", Coordinate: pt(10, 20), Screenshot: true}},
		{"click", []string{"0", "0"}, computerFlags{double: true}, &executorv1.ComputerRequest{Action: "double_click", Coordinate: pt(0, 0)}},
		{"click", []string{"1", "2"}, computerFlags{triple: true, button: "left"}, &executorv1.ComputerRequest{Action: "triple_click", Coordinate: pt(1, 2)}},
		{"move", []string{"5", "6"}, computerFlags{}, &executorv1.ComputerRequest{Action: "mouse_move", Coordinate: pt(5, 6)}},
		{"drag", []string{"1", "2", "3", "4"}, computerFlags{}, &executorv1.ComputerRequest{Action: "left_click_drag", StartCoordinate: pt(1, 2), Coordinate: pt(3, 4)}},
		{"down", nil, computerFlags{button: "middle"}, &executorv1.ComputerRequest{Action: "left_mouse_down", Button: "middle"}},
		{"up", nil, computerFlags{}, &executorv1.ComputerRequest{Action: "left_mouse_up"}},
		{"type", []string{"héllo wörld"}, computerFlags{}, &executorv1.ComputerRequest{Action: "type", Text: "héllo wörld"}},
		{"key", []string{"ctrl+l"}, computerFlags{}, &executorv1.ComputerRequest{Action: "key", Text: "ctrl+l"}},
		{"key", []string{"shift"}, computerFlags{hold: 1500 * time.Millisecond}, &executorv1.ComputerRequest{Action: "hold_key", Text: "shift", DurationMs: 1500}},
		{"scroll", []string{"100", "200", "down", "3"}, computerFlags{}, &executorv1.ComputerRequest{Action: "scroll", Coordinate: pt(100, 200), ScrollDirection: "down", ScrollAmount: 3}},
		{"cursor", nil, computerFlags{}, &executorv1.ComputerRequest{Action: "cursor_position"}},
		{"zoom", []string{"0", "0", "100", "50"}, computerFlags{out: "z.png"}, &executorv1.ComputerRequest{Action: "zoom", Region: []int32{0, 0, 100, 50}}},
	} {
		got, err := computerRequest(tc.action, tc.args, tc.f)
		if err != nil || !proto.Equal(got, tc.want) {
			t.Errorf("%s %v %+v: %v, %v; want %v", tc.action, tc.args, tc.f, got, err, tc.want)
		}
	}
}

// What can be checked here is refused before a call, saying what to give.
func TestComputerRequestRefused(t *testing.T) {
	for _, tc := range []struct {
		action string
		args   []string
		f      computerFlags
		want   string
	}{
		{"clack", nil, computerFlags{}, `unknown action "clack": use screenshot, click X Y`},
		{"click", []string{"1"}, computerFlags{}, "click takes 2 arguments, not 1"},
		{"click", []string{"1", "x"}, computerFlags{}, `"x" is not a position`},
		{"click", []string{"-1", "2"}, computerFlags{}, "0 or more"},
		{"click", []string{"99999999999", "2"}, computerFlags{}, "is not a position"},
		{"click", []string{"1", "2"}, computerFlags{button: "left", double: true, triple: true}, "not both"},
		{"click", []string{"1", "2"}, computerFlags{button: "right", double: true}, "click the left button"},
		{"click", []string{"1", "2"}, computerFlags{button: "side"}, "use left, right or middle"},
		{"move", []string{"1", "2"}, computerFlags{button: "right"}, "--button is for click, down and up"},
		{"move", []string{"1", "2"}, computerFlags{out: "x.png"}, "-o is for the screenshot"},
		{"type", []string{""}, computerFlags{}, "the text is empty"},
		{"type", []string{"a", "b"}, computerFlags{}, "type takes 1 argument, not 2"},
		{"key", []string{" "}, computerFlags{}, "the combo is empty"},
		{"key", []string{"a"}, computerFlags{hold: time.Hour}, "up to 1m40s"},
		{"type", []string{"a"}, computerFlags{hold: time.Second}, "--hold is for key"},
		{"scroll", []string{"1", "2", "sideways", "3"}, computerFlags{}, "use up, down, left or right"},
		{"scroll", []string{"1", "2", "up", "0"}, computerFlags{}, "from 1 to 100"},
		{"zoom", []string{"10", "10", "5", "20"}, computerFlags{}, "the region 10 10 5 20 is empty"},
		{"screenshot", nil, computerFlags{scale: "0x10"}, "--scale: \"0x10\" is not WIDTHxHEIGHT"},
		{"screenshot", nil, computerFlags{scale: "5000x10"}, "1 to 4096"},
		{"screenshot", nil, computerFlags{json: true, out: "-"}, "both write to stdout"},
	} {
		_, err := computerRequest(tc.action, tc.args, tc.f)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v %+v: %v; want an error saying %q", tc.action, tc.args, tc.f, err, tc.want)
		}
	}
}

func testPNG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	img.Set(1, 1, color.RGBA{255, 0, 0, 255})
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A screenshot is written where -o says (a PNG of its size, printed with
// it), or under a new name here; -o - writes only the PNG to stdout;
// --json carries it in base64 unless -o took it. An action prints the
// pointer.
func TestPrintComputer(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	data := testPNG(t, 400, 300)
	shot := func() *executorv1.ComputerResponse {
		return &executorv1.ComputerResponse{Png: data, Width: 400, Height: 300, ScreenWidth: 800, ScreenHeight: 600, Cursor: &executorv1.Point{X: 3, Y: 4}}
	}
	ctx := context.Background()
	run := func(req *executorv1.ComputerRequest, resp *executorv1.ComputerResponse, f computerFlags) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := printComputer(ctx, &out, &errOut, "sb1", req, resp, f); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	if got := run(&executorv1.ComputerRequest{Action: "screenshot"}, shot(), computerFlags{out: "a.png"}); !strings.HasPrefix(got, "a.png 400x300 (") {
		t.Errorf("-o a.png printed %q", got)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a.png")); err != nil || !bytes.Equal(b, data) {
		t.Errorf("a.png: %d bytes, %v", len(b), err)
	}
	got := run(&executorv1.ComputerRequest{Action: "screenshot"}, shot(), computerFlags{})
	name, _, _ := strings.Cut(got, " ")
	if !strings.HasPrefix(name, "screenshot-sb1-") || !strings.HasSuffix(name, ".png") {
		t.Errorf("without -o: printed %q", got)
	} else if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(b, data) {
		t.Errorf("%s: %d bytes, %v", name, len(b), err)
	}
	if got := run(&executorv1.ComputerRequest{Action: "screenshot"}, shot(), computerFlags{out: "-"}); got != string(data) {
		t.Errorf("-o - printed %d bytes, not the PNG", len(got))
	}
	if got := run(&executorv1.ComputerRequest{Action: "left_click"}, &executorv1.ComputerResponse{Cursor: &executorv1.Point{X: 3, Y: 4}}, computerFlags{}); got != "cursor 3,4\n" {
		t.Errorf("click printed %q", got)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(run(&executorv1.ComputerRequest{Action: "screenshot"}, shot(), computerFlags{json: true})), &m); err != nil || m["png"] == nil || m["screen_width"] != 800.0 {
		t.Errorf("--json: %v, %v", m, err)
	}
	m = nil
	if err := json.Unmarshal([]byte(run(&executorv1.ComputerRequest{Action: "screenshot"}, shot(), computerFlags{json: true, out: "b.png"})), &m); err != nil || m["png"] != nil && m["png"] != "" {
		t.Errorf("--json -o b.png still carries the png: %.20v, %v", m["png"], err)
	}
	if _, err := os.Stat(filepath.Join(dir, "b.png")); err != nil {
		t.Errorf("--json -o b.png: %v", err)
	}
}
