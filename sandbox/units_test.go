package sandbox

import (
	"errors"
	"testing"

	"github.com/reinsdev/reins/errdefs"
)

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{
		"4096": 4096, "512M": 512 << 20, "512m": 512 << 20, "1G": 1 << 30,
		"1.5GiB": 3 << 29, "128MiB": 128 << 20, "2gb": 2e9, "10k": 10 << 10, "7b": 7,
	} {
		got, err := ParseBytes(in)
		if err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "M", "-1G", "12 parsecs", "1e30G"} {
		if _, err := ParseBytes(in); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ParseBytes(%q) = %v; want an invalid-argument error", in, err)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{
		100: "100 B", 128 << 20: "128 MiB", 3 << 29: "1.5 GiB", 1 << 10: "1 KiB",
	} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q; want %q", n, got, want)
		}
	}
}

// TestBundleHostPath: a path inside maps through the bind mount whose
// target holds it, the longest one winning; a path under no mount, or one
// that only shares a prefix of a target's name, maps to nothing.
func TestBundleHostPath(t *testing.T) {
	b := Bundle{ID: "x", Mounts: []Mount{
		{Source: "/data/x/run", Target: "/.reins/run"},
		{Source: "/data/x/deep", Target: "/.reins/run/deep"},
		{Source: "/opt/exe", Target: "/.reins/bin/reins-executor"},
	}}
	for in, want := range map[string]string{
		"/.reins/run/executor.sock":    "/data/x/run/executor.sock",
		"/.reins/run/deep/s.sock":      "/data/x/deep/s.sock",
		"/.reins/run/../run/a.sock":    "/data/x/run/a.sock",
		"/.reins/bin/reins-executor":   "/opt/exe",
		"/.reins/runx/executor.sock":   "",
		"/workspace/executor.sock":     "",
		"/.reins/run/../../etc/x.sock": "",
	} {
		got, ok := b.HostPath(in)
		if ok != (want != "") || got != want {
			t.Errorf("HostPath(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	b.Listen = "/workspace/executor.sock"
	if _, err := b.UnixEndpoint(); err == nil {
		t.Error("an executor socket under no mount got an endpoint")
	}
	b.Listen = "/.reins/run/executor.sock"
	if ep, err := b.UnixEndpoint(); err != nil || ep.Unix != "/data/x/run/executor.sock" {
		t.Errorf("UnixEndpoint = %+v, %v", ep, err)
	}
}
