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
