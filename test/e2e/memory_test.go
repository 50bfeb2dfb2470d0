package e2e

import (
	"archive/tar"
	"bytes"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reinsdev/reins/image"
	"github.com/reinsdev/reins/internal/testenv"
)

// TestTmpdirOnDisk: every sandbox's TMPDIR is /var/tmp, on its disk, so
// spooling 300 MB there in a 256 MiB sandbox costs disk, not memory: the
// sandbox lives on and reads the file back. (gVisor mounts a tmpfs on an
// image's empty /tmp; 300 MB spooled there is RAM, and the memory limit
// kills the sandbox whole.)
func TestTmpdirOnDisk(t *testing.T) {
	s := startService(t)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			s.t = t
			id := s.create("--backend", backend, "--memory", "256M")
			r := s.run("sandbox", "exec", id, "--", "sh", "-c",
				`grep " /tmp " /proc/mounts >&2; echo "$TMPDIR"; dd if=/dev/zero of="$TMPDIR/spool" bs=1M count=300 2>/dev/null && wc -c < "$TMPDIR/spool"`)
			if r.code != 0 || r.stdout != "/var/tmp\n314572800\n" {
				t.Fatalf("spooling 300 MB to $TMPDIR: %s", r)
			}
			t.Logf("/tmp: %s", strings.TrimSpace(r.stderr))
			if out := s.must("sandbox", "exec", id, "--", "echo", "alive"); out != "alive\n" {
				t.Errorf("after the spool: %q", out)
			}
			show := s.must("sandbox", "show", id)
			if !strings.Contains(show, "running") {
				t.Errorf("sandbox show:\n%s", show)
			}
			t.Logf("%s", memoryLine(t, show))
		})
	}
}

// TestTmpdirMadeWhenMissing: in an image with no /var/tmp, the sandbox's
// TMPDIR is made, writable by anyone, sticky, like /tmp.
func TestTmpdirMadeWhenMissing(t *testing.T) {
	bb, err := os.ReadFile(image.DefaultBusybox())
	if err != nil {
		testenv.Missing(t, "the static busybox `make deps` builds: %v", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bb))})
	tw.Write(bb)
	tw.WriteHeader(&tar.Header{Name: "bin/sh", Typeflag: tar.TypeSymlink, Linkname: "busybox"})
	tw.WriteHeader(&tar.Header{Name: "bin/stat", Typeflag: tar.TypeSymlink, Linkname: "busybox"})
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	dir := ociLayout(t, buf.Bytes())
	s := startService(t)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			s.t = t
			id := s.create("--backend", backend, "--image", "oci:"+dir)
			r := s.run("sandbox", "exec", id, "--", "sh", "-c", `stat -c '%n %A' "$TMPDIR"`)
			if r.code != 0 || r.stdout != "/var/tmp drwxrwxrwt\n" {
				t.Errorf("TMPDIR in an image without it: %s", r)
			}
		})
	}
}

// TestPeakMemoryShown: sandbox show says the peak memory, which a
// command that held 100 MiB (and exited) raises past 100 MiB.
func TestPeakMemoryShown(t *testing.T) {
	s := startService(t)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			s.t = t
			id := s.create("--backend", backend, "--memory", "512M")
			before := peakMiB(t, memoryLine(t, s.must("sandbox", "show", id)))
			s.must("sandbox", "exec", id, "--", "dd", "if=/dev/zero", "of=/dev/null", "bs=100M", "count=1")
			line := memoryLine(t, s.must("sandbox", "show", id))
			after := peakMiB(t, line)
			t.Logf("peak before %.1f MiB; after: %s", before, line)
			if after < 100 || after <= before {
				t.Errorf("peak %.1f MiB after a 100 MiB command, %.1f MiB before", after, before)
			}
			if !strings.Contains(line, "% of the limit)") {
				t.Errorf("memory used line %q does not compare the peak with the limit", line)
			}
		})
	}
}

// TestPeakMemoryKept: a sandbox ended by its TTL, never shown while it
// ran, still says its peak.
func TestPeakMemoryKept(t *testing.T) {
	s := startService(t)
	id := s.create("--backend", "gvisor", "--ttl", "3s", "--on-expire", "delete")
	s.must("sandbox", "exec", id, "--", "dd", "if=/dev/zero", "of=/dev/null", "bs=100M", "count=1")
	var show string
	eventually(t, 20*time.Second, "the sandbox stopped by its TTL", func() (bool, string) {
		show = s.must("sandbox", "show", id)
		return strings.Contains(show, "ttl_expired"), show
	})
	line := memoryLine(t, show)
	if peak := peakMiB(t, line); peak < 100 || strings.Contains(line, " now") {
		t.Errorf("stopped sandbox: %q, want a peak past 100 MiB and nothing in use now", line)
	}
}

// memoryLine returns sandbox show's "memory used" line.
func memoryLine(t *testing.T, show string) string {
	t.Helper()
	for line := range strings.Lines(show) {
		if strings.HasPrefix(line, "memory used") {
			return strings.TrimSpace(line)
		}
	}
	t.Fatalf("sandbox show has no memory used line:\n%s", show)
	return ""
}

// peakMiB reads the peak from a "memory used" line ("peak 116 MiB").
func peakMiB(t *testing.T, line string) float64 {
	t.Helper()
	m := regexp.MustCompile(`peak ([0-9.]+) (KiB|MiB|GiB)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no peak in %q", line)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	switch m[2] {
	case "KiB":
		v /= 1024
	case "GiB":
		v *= 1024
	}
	return v
}
