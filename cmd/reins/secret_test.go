package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestReadSecretValue: piped input loses exactly one trailing "\n", and
// nothing else; more than the read limit is refused before it is sent.
func TestReadSecretValue(t *testing.T) {
	for in, want := range map[string]string{
		"s3cret":        "s3cret",
		"s3cret\n":      "s3cret",
		"s3cret\n\n":    "s3cret\n",
		"s3cret\r\n":    "s3cret\r",
		"\n":            "",
		" two words \n": " two words ",
		"line1\nline2":  "line1\nline2",
	} {
		got, err := readSecretValue(strings.NewReader(in))
		if err != nil || string(got) != want {
			t.Errorf("readSecretValue(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	got, err := readSecretValue(bytes.NewReader(make([]byte, maxSecretInput+1)))
	var ue usageError
	if got != nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), "16 KiB") {
		t.Errorf("more than 1 MiB: %d bytes, %v; want a usage error naming the limit", len(got), err)
	}
	if got, err := readSecretValue(bytes.NewReader(make([]byte, maxSecretInput))); err != nil || len(got) != maxSecretInput {
		t.Errorf("exactly 1 MiB is read whole (the service refuses it, naming its limit): %d, %v", len(got), err)
	}
}
