package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	exclient "github.com/reinsdev/reins/executor/client"
	rimage "github.com/reinsdev/reins/image"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/manager"
	"github.com/reinsdev/reins/server"
)

// view: the live view's frame stream (GET /view/ID/frames through the
// service) of a desktop sandbox on gVisor at 1280x800 whose screen keeps
// changing (an xterm printing the time without pause), beside the
// executor's screenshots taken back to back with nothing between them, for
// the same time: frames a second and bytes a frame. Then input through the
// view (a click POSTed while the screen is held) until the stream shows
// its effect, beside the executor's own click with screenshots after it,
// on bench/flipper (a window that flips its colour on each click).
func (b *bench) view(secs int, rounds int) error {
	ctx := b.ctx
	box, done, err := b.desktop("view")
	if err != nil {
		return err
	}
	defer done()
	m, ex := box.m, box.ex
	srv := httptest.NewServer(server.New(server.Over(m), "t", nil).WithHolds(m).
		WithPorts(&server.Ports{Domain: "localhost", Key: make([]byte, 32)}).Handler())
	defer srv.Close()
	base := srv.URL + "/view/" + box.id

	// A screen that keeps changing: an xterm filling it, printing the
	// time without pause.
	changer, err := ex.Start(ctx, &executorv1.ExecRequest{Argv: []string{"xterm", "-geometry", "200x60+0+0", "-e",
		"sh", "-c", "while :; do date +%T.%N; done"}, Background: true})
	if err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // its window shown
	dur := time.Duration(secs) * time.Second
	raw, rawBytes := 0, 0
	for t0 := time.Now(); time.Since(t0) < dur; raw++ {
		resp, err := ex.Computer(ctx, &executorv1.ComputerRequest{Action: "screenshot"})
		if err != nil {
			return err
		}
		rawBytes += len(resp.Png)
	}
	sctx, cancel := context.WithTimeout(ctx, dur)
	frames, frameBytes, err := countFrames(sctx, base+"/frames", func([]byte) bool { return true })
	cancel()
	if err != nil {
		return err
	}
	if err := ex.Signal(ctx, changer.Pid, syscall.SIGKILL); err != nil {
		return err
	}
	fps := func(n int) float64 { return float64(n) / dur.Seconds() }
	b.add("view: frames a second, 1280x800, a screen that keeps changing", fmt.Sprintf("%.1f /s (at most %.0f)", fps(frames), float64(time.Second)/float64(server.ViewFrameInterval)),
		fmt.Sprintf("%.1f /s executor screenshots back to back", fps(raw)), fps(frames)/fps(raw), "")
	b.add("view: bytes a frame", fmt.Sprintf("%d KiB", frameBytes/max(frames, 1)>>10),
		fmt.Sprintf("%d KiB a screenshot", rawBytes/max(raw, 1)>>10), float64(frameBytes/max(frames, 1))/float64(rawBytes/max(raw, 1)), "")
	if err := b.startFlipper(ex); err != nil {
		return err
	}
	return b.viewInput(ex, base, rounds)
}

// desktopBox is a desktop sandbox, its manager and its executor.
type desktopBox struct {
	m  *manager.Manager
	id string
	ex *exclient.Client
}

// desktop makes a desktop sandbox on gVisor (1280x800) under its own
// manager in dir name, the desktop image built once into -images; done
// removes it.
func (b *bench) desktop(name string) (*desktopBox, func(), error) {
	ctx := b.ctx
	images, err := rimage.NewStore(*workloadImages)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintln(os.Stderr, "  resolving the desktop image (built once into", *workloadImages+")")
	if _, err := images.Resolve(ctx, "desktop", nil); err != nil {
		return nil, nil, err
	}
	m, err := manager.New(manager.Config{
		Dir: filepath.Join(b.dir, name), ExecutorPath: b.executor,
		Backends: map[string]sandbox.Backend{"gvisor": b.gv}, DefaultBackend: "gvisor",
		Images: manager.ImageStore(images), CheckInterval: time.Hour,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, nil, err
	}
	rec, err := m.Create(ctx, "", sandbox.Spec{Image: "desktop", Limits: sandbox.Limits{MemoryBytes: 2 << 30}}, nil)
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	done := func() { m.Delete(ctx, "", rec.ID); m.Close() }
	ex, err := m.Client(ctx, "", rec.ID)
	if err != nil {
		done()
		return nil, nil, err
	}
	return &desktopBox{m: m, id: rec.ID, ex: ex}, done, nil
}

// startFlipper builds bench/flipper, starts it in the sandbox and waits
// for its window.
func (b *bench) startFlipper(ex *exclient.Client) error {
	ctx := b.ctx
	bin := filepath.Join(b.dir, "flipper")
	build := exec.Command("go", "build", "-o", bin, "./bench/flipper")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building bench/flipper: %v: %s", err, out)
	}
	prog, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	if err := ex.WriteFile(ctx, "/tmp/flipper", prog, 0o755); err != nil {
		return err
	}
	if _, err := ex.Start(ctx, &executorv1.ExecRequest{Argv: []string{"sh", "-c", "/tmp/flipper > /tmp/flipper.log 2>&1"}, Background: true}); err != nil {
		return err
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		out, _, _, err := ex.Run(ctx, "cat", "/tmp/flipper.log")
		if err != nil {
			return err
		}
		if bytes.Contains(out, []byte("ready")) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("flipper did not show its window: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// viewInput times a click sent through the view until a frame of the
// stream shows it, beside the executor's click until a screenshot does.
func (b *bench) viewInput(ex *exclient.Client, base string, rounds int) error {
	ctx := b.ctx
	post := func(path, body string) error {
		req, _ := http.NewRequestWithContext(ctx, "POST", base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer t")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			msg, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("%s: %d %s", path, resp.StatusCode, msg)
		}
		return nil
	}
	if err := post("/takeover", `{"by":"bench"}`); err != nil {
		return err
	}
	centre := func(png []byte) ([3]uint8, error) {
		img, err := checkPNG(png, 1280, 800)
		if err != nil {
			return [3]uint8{}, err
		}
		return rgb8(img, 640, 400), nil
	}
	var ours, direct []time.Duration
	for i := 0; i < rounds+2; i++ {
		// Through the view: the stream is open and settled on the current
		// colour; the click goes in, the time is until a frame differs.
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		var before [3]uint8
		var t0 time.Time
		var d time.Duration
		var cerr error
		n := 0
		_, _, err := countFrames(sctx, base+"/frames", func(png []byte) bool {
			c, err := centre(png)
			if err != nil {
				cerr = err
				return false
			}
			n++
			if n == 1 {
				before, t0 = c, time.Now()
				go func() {
					if err := post("/input", `{"action":"click","x":640,"y":400}`); err != nil {
						cerr = err
					}
				}()
				return true
			}
			if c != before {
				d = time.Since(t0)
				return false
			}
			return true
		})
		cancel()
		if err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("a click through the view: %w", err)
		}
		// The executor's own click, then screenshots until it shows.
		first, err := ex.Computer(ctx, &executorv1.ComputerRequest{Action: "screenshot"})
		if err != nil {
			return err
		}
		was, err := centre(first.Png)
		if err != nil {
			return err
		}
		t1 := time.Now()
		resp, err := ex.Computer(ctx, &executorv1.ComputerRequest{Action: "left_click", Coordinate: &executorv1.Point{X: 640, Y: 400}, Screenshot: true, ScreenshotDelayMs: 1})
		for err == nil {
			c, cerr := centre(resp.Png)
			if cerr != nil {
				return cerr
			}
			if c != was {
				break
			}
			if time.Since(t1) > 10*time.Second {
				return fmt.Errorf("the executor's click never showed")
			}
			resp, err = ex.Computer(ctx, &executorv1.ComputerRequest{Action: "screenshot"})
		}
		if err != nil {
			return err
		}
		if i >= 2 {
			ours, direct = append(ours, d), append(direct, time.Since(t1))
		}
	}
	b.add("view: click through the view → change in the stream (p50)", ms(pct(ours, 50)),
		ms(pct(direct, 50))+" the executor's click, then its screenshots", ratio(pct(ours, 50), pct(direct, 50)), "")
	b.add("view: click → change in the stream (p90)", ms(pct(ours, 90)), ms(pct(direct, 90))+" the executor's click", ratio(pct(ours, 90), pct(direct, 90)), "")
	return nil
}

// countFrames reads the frame stream at url until ctx ends or each
// returns false, and counts the frames and their bytes.
func countFrames(ctx context.Context, url string, each func(png []byte) bool) (n, size int, err error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Authorization", "Bearer t")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	_, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || resp.StatusCode != 200 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return 0, 0, fmt.Errorf("the frame stream: %d %s", resp.StatusCode, msg)
	}
	mr := multipart.NewReader(resp.Body, params["boundary"])
	for {
		p, err := mr.NextPart()
		if err != nil {
			return n, size, nil // the time is up (or the stream ended)
		}
		data, err := io.ReadAll(io.LimitReader(p, server.MaxFrameBytes+1))
		if err != nil {
			return n, size, nil
		}
		n, size = n+1, size+len(data)
		if !each(data) {
			return n, size, nil
		}
	}
}
