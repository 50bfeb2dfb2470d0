package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/reinsdev/reins/sandbox/manager"
)

// --pool flags are checked at serve start, each error naming the flag.
func TestParsePool(t *testing.T) {
	got, err := parsePool([]string{"busybox=2", "oci:/srv/img=1", "template:web=3"})
	if err != nil {
		t.Fatal(err)
	}
	want := []manager.PoolSize{{Image: "busybox", Size: 2}, {Image: "oci:/srv/img", Size: 1}, {Image: "template:web", Size: 3}}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, bad := range []string{"busybox", "=2", "busybox=0", "busybox=-1", "busybox=x", "busybox=65", " busybox=1", "a b=1"} {
		_, err := parsePool([]string{bad})
		var u usageError
		if !errors.As(err, &u) || !strings.Contains(err.Error(), "--pool") {
			t.Errorf("--pool %q: %v, want a usage error naming --pool", bad, err)
		}
	}
	if _, err := parsePool([]string{"busybox=1", "busybox=2"}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a key given twice: %v", err)
	}
}
