package e2b

import (
	"net/http"
	"testing"
	"time"
)

// A Keepalive-Ping-Interval whose seconds overflow a Duration must not
// set a ticker of nanoseconds.
func TestHostileKeepaliveIntervalOverflow(t *testing.T) {
	for _, v := range []string{"20211507185753197", "9223372036854775807", "18446744073"} {
		hdr := http.Header{"Keepalive-Ping-Interval": {v}}
		if d := keepaliveInterval(hdr); d < time.Second || d > keepaliveMax {
			t.Errorf("Keepalive-Ping-Interval %s: interval %v, want 1s to %v", v, d, keepaliveMax)
		}
	}
}
