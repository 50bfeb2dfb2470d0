package sandbox

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/reinsdev/reins/errdefs"
)

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	// Kubernetes' Ki, Mi, Gi, Ti.
	{"ki", 1 << 10}, {"mi", 1 << 20}, {"gi", 1 << 30}, {"ti", 1 << 40},
	{"kb", 1000}, {"mb", 1000 * 1000}, {"gb", 1000 * 1000 * 1000}, {"tb", 1000 * 1000 * 1000 * 1000},
	// Bare k, m, g, t are binary, as in docker's --memory.
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

// ParseBytes reads a size such as "512M", "1.5GiB", "128Mi" or "4096".
// Bare K, M, G, T are powers of two, as docker's --memory takes them, and
// so are Kubernetes' Ki, Mi, Gi, Ti; KB, MB, GB, TB are powers of ten.
func ParseBytes(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || f*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("%q is not a size: write a number with an optional unit, like 512M, 2G or 1.5GiB: %w", s, errdefs.ErrInvalidArgument)
	}
	return int64(f * float64(mult)), nil
}

// FormatBytes writes n the way a person reads it: "128 MiB", "1.5 GiB".
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	s := strconv.FormatFloat(v, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return s + " " + string("KMGTP"[exp]) + "iB"
}
