package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/reinsdev/reins/sandbox"
)

// Flag values in the units docker and kubectl users type (docs/cli.md):
// sizes 512M (M is MiB, as docker's --memory), 128Mi, 1Gi, 2GB (GB is
// 10^9); CPUs 0.5, 2 or 500m (millicores); durations with a unit, 30s,
// 5m, 1h30m. A value they refuse is a usage error that says what to type
// (newRoot's flag error func puts the flag and the value in front).

// flagWords is a flag value's refusal in words a person acts on.
type flagWords struct{ error }

func (w flagWords) Unwrap() error { return w.error }

func refuse(format string, args ...any) error { return flagWords{fmt.Errorf(format, args...)} }

// sizeFlag is a byte size flag. Zero is refused: leaving the flag out is
// how to ask for the default, and a zero limit is never what was meant.
type sizeFlag struct{ v int64 }

func (f *sizeFlag) String() string {
	if f.v == 0 {
		return ""
	}
	return sandbox.FormatBytes(f.v)
}
func (f *sizeFlag) Type() string { return "size" }
func (f *sizeFlag) Set(s string) error {
	v, err := sandbox.ParseBytes(s)
	switch {
	case err != nil:
		return refuse("not a size: write a number and a unit, like 512Mi, 2Gi, 512M (M is MiB) or 2GB (GB is 10^9 bytes)")
	case v == 0:
		return refuse("give a size such as 512Mi, or leave it out for the default")
	}
	f.v = v
	return nil
}

// cpuFlag is a number of CPUs: 0.5, 2, or kubectl's 500m.
type cpuFlag struct{ v float64 }

func (f *cpuFlag) String() string {
	if f.v == 0 {
		return ""
	}
	return strconv.FormatFloat(f.v, 'g', -1, 64)
}
func (f *cpuFlag) Type() string { return "cpus" }
func (f *cpuFlag) Set(s string) error {
	v, err := parseCPUs(s)
	if err != nil {
		return err
	}
	f.v = v
	return nil
}

func parseCPUs(s string) (float64, error) {
	t := strings.TrimSpace(s)
	div := 1.0
	if m, ok := strings.CutSuffix(t, "m"); ok {
		t, div = m, 1000
	}
	v, err := strconv.ParseFloat(t, 64)
	switch {
	case err != nil || v < 0 || v != v || v > 1<<20:
		return 0, refuse("not a number of CPUs: write one like 0.5, 2 or 500m (millicores)")
	case v == 0:
		return 0, refuse("give a number of CPUs such as 0.5, 2 or 500m, or leave it out for the default")
	}
	return v / div, nil
}

// durationFlag is time.Duration's flag that refuses a bare number: "30"
// is 30 what? (pflag's own reads "0" only, and so does this one.)
type durationFlag struct{ v *time.Duration }

func (f durationFlag) String() string {
	if f.v == nil || *f.v == 0 {
		return "0" // what pflag's help takes for "no default"
	}
	return f.v.String()
}
func (f durationFlag) Type() string { return "duration" }
func (f durationFlag) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	*f.v = d
	return nil
}

func parseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if n, err := strconv.ParseFloat(t, 64); err == nil && n != 0 {
		return 0, refuse("did you mean %ss? a duration needs a unit: 500ms, 30s, 5m, 1h", t)
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, refuse("not a duration: write one with a unit, like 500ms, 30s, 5m or 1h30m")
	}
	return d, nil
}

// durationVar is pflag's DurationVar with durationFlag's refusals.
func durationVar(f *pflag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	f.Var(durationFlag{p}, name, usage)
}
