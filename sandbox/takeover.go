package sandbox

import "time"

// Hold is a person's take-over of a sandbox's screen: while it stands, a
// run's computer calls on the sandbox wait, and the person's input goes
// through the live view. It lives in the service's memory only (a restart
// of the service hands the screen back).
type Hold struct {
	// By names who holds it, for the run's log and the view page.
	By    string
	Since time.Time
	// Last is the last input (or the hold itself); an idle hold is handed
	// back IdleHold after it.
	Last time.Time
}

// IdleHold is how long a take-over lasts without input before it is handed
// back on its own, so that a run is never stuck on a forgotten tab.
const IdleHold = 15 * time.Minute

// Kinds of lifecycle event of a take-over (with EventCreated and the rest).
const (
	EventTakeover = "takeover"
	EventHandback = "handback"
)
