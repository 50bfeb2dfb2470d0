package errdefs

import (
	"errors"
	"fmt"
	"testing"
)

func TestKindsSurviveTheWire(t *testing.T) {
	for kind := range kindNames {
		err := fmt.Errorf("sandbox x: %w", kind)
		back := FromConnect(ToConnect(err))
		if !errors.Is(back, kind) {
			t.Errorf("%v came back as %v", kind, Kind(back))
		}
	}
	// Too large and no space share a code; the header keeps them apart.
	if back := FromConnect(ToConnect(fmt.Errorf("write: %w", ErrNoSpace))); !errors.Is(back, ErrNoSpace) || errors.Is(back, ErrTooLarge) {
		t.Errorf("no space came back as %v", Kind(back))
	}
}

func TestWireMessageDropsTheKindSuffix(t *testing.T) {
	err := fmt.Errorf("sandbox abc not found: %w", ErrNotFound)
	if got := FromConnect(ToConnect(err)).Error(); got != "sandbox abc not found" {
		t.Errorf("message = %q", got)
	}
}

func TestUnkindedErrorsAreInternal(t *testing.T) {
	back := FromConnect(ToConnect(errors.New("boom")))
	if !errors.Is(back, ErrInternal) || back.Error() != "boom" {
		t.Errorf("got %v (%v)", back, Kind(back))
	}
}

func TestExitCodesSurviveTheWire(t *testing.T) {
	err := WithExitCode(WithMessage(ErrNotFound, "command not found: x"), 127)
	back := FromConnect(ToConnect(err))
	if code, ok := ExitCode(back); !ok || code != 127 || !errors.Is(back, ErrNotFound) || back.Error() != "command not found: x" {
		t.Errorf("came back as %v (code %d %v, kind %v)", back, code, ok, Kind(back))
	}
	if _, ok := ExitCode(FromConnect(ToConnect(ErrNotFound))); ok {
		t.Error("an error without an exit code came back with one")
	}
}
