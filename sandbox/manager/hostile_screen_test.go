package manager

import (
	"errors"
	"strings"
	"testing"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// A tenant's screen and an image's display label are untrusted: a size
// past the bounds (a frame of 64 MiB at most) is refused, not handed to
// the executor as an X server to allocate, and a megabyte of junk is not
// echoed back whole.
func TestHostileScreen(t *testing.T) {
	junk := strings.Repeat("9", 1<<20)
	for _, tc := range []struct {
		what string
		spec sandbox.Spec
		img  Image
	}{
		{"a megabyte screen", sandbox.Spec{Image: "desk", Screen: junk + "x800"}, Image{Screen: "1280x800"}},
		{"a huge screen", sandbox.Spec{Image: "desk", Screen: "65536x65536"}, Image{Screen: "1280x800"}},
		{"an int overflow", sandbox.Spec{Image: "desk", Screen: "9223372036854775808x1"}, Image{Screen: "1280x800"}},
		{"a label past the bounds", sandbox.Spec{Image: "desk"}, Image{Screen: "100000x100000"}},
		{"a megabyte label", sandbox.Spec{Image: "desk"}, Image{Screen: junk}},
		{"a screen on an image without a display", sandbox.Spec{Image: "busybox", Screen: "1024x768"}, Image{}},
	} {
		s, err := checkScreen(tc.spec.Screen)
		if err == nil {
			tc.spec.Screen = s
			s, err = screenOf(tc.spec, tc.img)
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: screen %.20q, %v; want invalid_argument", tc.what, s, err)
			continue
		}
		if n := len(err.Error()); n > 300 {
			t.Errorf("%s: the error is %d bytes long", tc.what, n)
		}
	}
}
