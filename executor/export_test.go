package executor

import "time"

// SetRelistenAfter shortens RelistenAfter for a test; the returned func
// puts it back.
func SetRelistenAfter(d time.Duration) func() {
	old := relistenAfter
	relistenAfter = d
	return func() { relistenAfter = old }
}
