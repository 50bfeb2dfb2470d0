package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/sandbox"
)

// What sandbox show adds to the spec: the TTL left, the environment with
// secret values masked, and what the sandbox uses now (the executor's
// Usage call).

// expiryWords is when a sandbox expires: "in 29m50s (at 2026-…Z; ttl 30m)".
func expiryWords(sb *reinsv1.Sandbox, now time.Time) string {
	at := time.Unix(0, sb.ExpiresUnixNano)
	left := at.Sub(now).Round(time.Second)
	s := fmt.Sprintf("in %s (at %s", left, at.UTC().Format(time.RFC3339))
	if left <= 0 {
		s = fmt.Sprintf("now (due at %s", at.UTC().Format(time.RFC3339))
	}
	if ttl := sb.GetSpec().GetTtlMs(); ttl > 0 {
		s += fmt.Sprintf("; ttl %s", time.Duration(ttl)*time.Millisecond)
	}
	return s + ")"
}

// secretWords are the words of a variable's name that mark its value as
// a credential, and secretEnds the ones that do so at the end of a word
// too (APIKEY, GHTOKEN); such values are masked in show. Masking more
// than needed costs a look at --json; less leaks a key onto a screen.
var (
	secretWords = []string{"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "PW", "CREDENTIALS", "CREDENTIAL",
		"AUTH", "AUTHORIZATION", "PRIVATE", "COOKIE", "SESSION", "SIGNATURE", "DSN"}
	secretEnds = []string{"KEY", "TOKEN", "SECRET", "PASSWORD"}
)

// secretName says whether name looks like a credential's: API_KEY,
// GITHUB_TOKEN, DB_PASS, AWS_SECRET_ACCESS_KEY; not PATH or KEYBOARD.
func secretName(name string) bool {
	for _, part := range strings.FieldsFunc(strings.ToUpper(name), func(r rune) bool { return r == '_' || r == '-' || r == '.' }) {
		if slices.Contains(secretWords, part) || slices.ContainsFunc(secretEnds, func(w string) bool { return strings.HasSuffix(part, w) }) {
			return true
		}
	}
	return false
}

// printSandboxEnv prints the sandbox's environment, one variable a line,
// with secret-looking values masked and the reins secrets it is given
// (whose value in the sandbox is a placeholder) named as such.
func printSandboxEnv(w io.Writer, sb *reinsv1.Sandbox) {
	label := "env"
	line := func(s string) {
		fmt.Fprintf(w, "%s\t%s\n", label, s)
		label = ""
	}
	for _, kv := range sb.GetSpec().GetEnv() {
		k, v, _ := strings.Cut(kv, "=")
		if secretName(k) && v != "" {
			v = "•••• (masked)"
		}
		line(k + "=" + v)
	}
	for _, b := range sb.GetSpec().GetNetwork().GetSecrets() {
		line(b.Name + "=•••• (reins secret: a placeholder here, the value sent only to " + strings.Join(b.Hosts, ", ") + ")")
	}
}

// printUsage prints what a running sandbox uses, as its executor reports
// it; nothing when it does not answer soon. Its memory is left out when
// the host's figure is printed already (hostMemory: the "memory used"
// line), so that show does not give two figures for one thing.
func printUsage(ctx context.Context, w io.Writer, sb *client.Sandbox, hostMemory bool) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	u, err := client.Unary(ctx, sb, sb.RPC().Usage, &executorv1.UsageRequest{})
	if err != nil {
		return
	}
	fmt.Fprintf(w, "usage\t%s\n", usageWords(u, hostMemory))
}

// usageWords: "memory 12 MiB, disk 3.1 MiB of 4 GiB, 2 processes, CPU
// 0.4s", without the memory when hostMemory.
func usageWords(u *executorv1.UsageResponse, hostMemory bool) string {
	disk := sandbox.FormatBytes(int64(min(u.DiskUsedBytes, 1<<62)))
	if u.DiskTotalBytes > 0 {
		disk += " of " + sandbox.FormatBytes(int64(min(u.DiskTotalBytes, 1<<62)))
	}
	words := fmt.Sprintf("disk %s, %s, CPU %.1fs", disk, count(int(u.Processes), "process"), u.CpuSeconds)
	if hostMemory {
		return words
	}
	return "memory " + sandbox.FormatBytes(int64(min(u.MemoryBytes, 1<<62))) + ", " + words
}
