package manager

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// TestTransitions: every step the table allows is recorded on disk as it
// is, a stop carries its reason and time, and every other step (a stopped
// sandbox started again, a suspend from creating, a stop without reason,
// a reason without a stop) is refused with the record untouched.
func TestTransitions(t *testing.T) {
	m := &Manager{log: slog.Default()}
	box := func(st sandbox.State) *box {
		b := &box{dir: t.TempDir(), rec: Record{Info: sandbox.Info{ID: "s1", State: st}}}
		if err := writeRecord(b.dir, &b.rec); err != nil {
			t.Fatal(err)
		}
		return b
	}
	all := []sandbox.State{sandbox.StateCreating, sandbox.StateRunning, sandbox.StatePaused, sandbox.StateSuspended, sandbox.StateStopped}
	allowed := 0
	for _, from := range all {
		for _, to := range all {
			b := box(from)
			reason := sandbox.Reason("")
			if to == sandbox.StateStopped {
				reason = sandbox.ReasonKilled
			}
			err := m.setState(b, to, reason, "")
			onDisk, rerr := readRecord(b.dir)
			if rerr != nil {
				t.Fatal(rerr)
			}
			ok := false
			for _, s := range transitions[from] {
				ok = ok || s == to
			}
			switch {
			case ok && err != nil:
				t.Errorf("%s → %s: %v", from, to, err)
			case ok && (onDisk.State != to || onDisk.Reason != reason || (to == sandbox.StateStopped) == onDisk.StoppedAt.IsZero()):
				t.Errorf("%s → %s: on disk %s %q stopped_at %v", from, to, onDisk.State, onDisk.Reason, onDisk.StoppedAt)
			case ok && b.stopped.Load() != (to == sandbox.StateStopped):
				t.Errorf("%s → %s: stopped flag %v", from, to, b.stopped.Load())
			case !ok && !errors.Is(err, errdefs.ErrInternal):
				t.Errorf("%s → %s was allowed (%v)", from, to, err)
			case !ok && onDisk.State != from:
				t.Errorf("%s → %s refused, yet the record says %s", from, to, onDisk.State)
			}
			if ok {
				allowed++
			}
		}
	}
	if allowed != 9 {
		t.Errorf("%d transitions allowed, want the diagram's 9", allowed)
	}
	for _, c := range []struct {
		to     sandbox.State
		reason sandbox.Reason
	}{{sandbox.StateStopped, ""}, {sandbox.StateSuspended, sandbox.ReasonKilled}} {
		b := box(sandbox.StateRunning)
		if err := m.setState(b, c.to, c.reason, ""); !errors.Is(err, errdefs.ErrInternal) {
			t.Errorf("running → %s with reason %q: %v, want refused", c.to, c.reason, err)
		}
	}
}
