package agent

import "time"

// SetStartWait sets how long Start waits for an image to resolve, and
// returns the undo.
func SetStartWait(d time.Duration) func() {
	old := startWait
	startWait = d
	return func() { startWait = old }
}
