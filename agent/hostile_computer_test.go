package agent_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"image"
	"image/png"
	"strings"
	"testing"

	"github.com/reinsdev/reins/agent"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/tool"
)

// shooter is a tool whose result carries the images it is given.
type shooter struct{ images [][]byte }

func (s shooter) Spec() tool.Spec {
	return tool.Spec{Name: "shoot", Description: "images", InputSchema: json.RawMessage(`{"type":"object"}`), Side: tool.SideTrusted}
}
func (s shooter) Call(context.Context, string, json.RawMessage) (tool.Result, error) {
	return tool.Result{Text: "shot", Images: s.images}, nil
}

// TestHostileResultImages: images in a tool result are stored only when
// they are PNGs within bounds (checked before anything decodes them);
// others are dropped and the model is told which and why.
func TestHostileResultImages(t *testing.T) {
	var good bytes.Buffer
	png.Encode(&good, image.NewGray(image.Rect(0, 0, 4, 4)))
	huge := append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR"), make([]byte, 8+9<<20)...)
	binary.BigEndian.PutUint32(huge[16:], 100)
	binary.BigEndian.PutUint32(huge[20:], 100)
	claims := append([]byte(nil), good.Bytes()...)
	binary.BigEndian.PutUint32(claims[16:], 1<<30) // a header claiming a 1G-wide image

	e := newEnv(t)
	eng, err := agent.New(agent.Config{Store: e.st, Blobs: e.blobs, Sandboxes: e.sbs, Models: e.engineModels(),
		Trusted: []tool.Tool{shooter{[][]byte{[]byte("<svg>not a png</svg>"), huge, claims, good.Bytes()}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	id, err := eng.Start(context.Background(), "", runlog.Spec{Task: "shoot", Model: e.script(turn("", call("shoot", map[string]any{})), turn("done"))})
	if err != nil {
		t.Fatal(err)
	}
	_, evs := e.finish(eng, id)
	var res runlog.ToolResult
	for _, ev := range evs {
		if ev.Type == runlog.EventToolResult {
			json.Unmarshal(ev.Data, &res)
		}
	}
	for _, want := range []string{"[image 1 of this result was dropped: the image is not a PNG",
		"[image 2 of this result was dropped: the image is 9437208 bytes, over the limit of 8 MiB",
		"[image 3 of this result was dropped: the PNG is 1073741824x4"} {
		if !strings.Contains(res.Text, want) {
			t.Errorf("result %q does not say %q", res.Text, want)
		}
	}
	if len(res.Images) != 1 {
		t.Fatalf("%d images stored, want only the good one", len(res.Images))
	}
	rc, err := e.blobs.Open(context.Background(), res.Images[0])
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := png.Decode(rc); err != nil {
		t.Errorf("the stored image is not the PNG: %v", err)
	}
}
