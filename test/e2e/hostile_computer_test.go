package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/internal/testenv"
)

// Hostile input to computer use, sent through the API as any client can
// (past the CLI's own checks): a screen out of bounds or of a megabyte,
// a screen on an image without a display, a computer call on a sandbox
// without one, and coordinates off the screen or past int32 — each
// refused with the kind and words that say what to do, the screen's
// size named for the coordinates.
func TestHostileComputer(t *testing.T) {
	testenv.RequiresBinary(t, "debootstrap", "debootstrap")
	s := startService(t)
	cl := client.New(s.url, s.token)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	for _, tc := range []struct {
		what string
		spec *reinsv1.SandboxSpec
		want string
	}{
		{"a screen of 10x10", &reinsv1.SandboxSpec{Image: "desktop", Screen: "10x10"}, "out of bounds"},
		{"a screen of 100000x100000", &reinsv1.SandboxSpec{Image: "desktop", Screen: "100000x100000"}, "out of bounds"},
		{"a megabyte screen", &reinsv1.SandboxSpec{Image: "desktop", Screen: strings.Repeat("1", 1<<20)}, "is not WIDTHxHEIGHT"},
		{"a screen on busybox", &reinsv1.SandboxSpec{Image: "busybox", Screen: "1024x768"}, "--image desktop"},
	} {
		sb, err := cl.Create(ctx, tc.spec, nil)
		if err == nil {
			s.run("sandbox", "rm", sb.Id)
			t.Errorf("%s: created %s", tc.what, sb.Id)
			continue
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) || len(err.Error()) > 400 {
			t.Errorf("%s: %.400v; want invalid_argument saying %q, briefly", tc.what, err, tc.want)
		}
	}

	plain := s.create("--network", "none")
	defer s.run("sandbox", "rm", plain)
	if _, err := cl.Sandbox(plain).Computer(ctx, &executorv1.ComputerRequest{Action: "left_click", Coordinate: &executorv1.Point{X: 1, Y: 1}}); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "--image desktop") {
		t.Errorf("a click on busybox: %v; want failed_precondition naming --image desktop", err)
	}

	id := s.create("--backend", "runc", "--image", "desktop", "--screen", "1024x768", "--network", "none")
	defer s.run("sandbox", "rm", id)
	sb := cl.Sandbox(id)
	pt := func(x, y int32) *executorv1.Point { return &executorv1.Point{X: x, Y: y} }
	for _, tc := range []struct {
		what string
		req  *executorv1.ComputerRequest
	}{
		{"a click left of the screen", &executorv1.ComputerRequest{Action: "left_click", Coordinate: pt(-5, 10)}},
		{"a click past int32's end", &executorv1.ComputerRequest{Action: "left_click", Coordinate: pt(1<<31-1, 1<<31-1)}},
		{"a click just off the bottom", &executorv1.ComputerRequest{Action: "left_click", Coordinate: pt(0, 768)}},
		{"a move off a scaled space", &executorv1.ComputerRequest{Action: "mouse_move", Coordinate: pt(600, 10), ScaleWidth: 512, ScaleHeight: 384}},
		{"a drag from off the screen", &executorv1.ComputerRequest{Action: "left_click_drag", StartCoordinate: pt(-1, -1), Coordinate: pt(10, 10)}},
		{"a scroll off the screen", &executorv1.ComputerRequest{Action: "scroll", Coordinate: pt(2000, 10), ScrollDirection: "down", ScrollAmount: 1}},
		{"a zoom past the screen", &executorv1.ComputerRequest{Action: "zoom", Region: []int32{0, 0, 5000, 5000}}},
	} {
		resp, err := sb.Computer(ctx, tc.req)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "1024x768") && !strings.Contains(err.Error(), "512x384") {
			t.Errorf("%s: %v (answer %v); want invalid_argument naming the screen's size", tc.what, err, resp != nil)
		}
	}
	// The display still works after all that.
	resp, err := sb.Computer(ctx, &executorv1.ComputerRequest{Action: "screenshot"})
	if err != nil || resp.Width != 1024 || resp.Height != 768 {
		t.Fatalf("a screenshot after the refusals: %v", err)
	}
	decodePNG(t, resp.Png, 1024, 768)
}
