package main

import (
	"archive/tar"
	"bytes"
	"io"
	"slices"
	"testing"
)

// TestHostileCpTarToStdout: `cp ID:/path -` passes the sandbox's tar
// stream on to a local tar; an entry a hostile executor adds outside the
// copied name (absolute, with "..", another top name), a device node, a
// fifo, or a hard link to a file outside never reaches it.
func TestHostileCpTarToStdout(t *testing.T) {
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	add := func(h *tar.Header, body string) {
		h.Size = int64(len(body))
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	add(&tar.Header{Name: "out/", Typeflag: tar.TypeDir, Mode: 0o755}, "")
	add(&tar.Header{Name: "out/report.txt", Typeflag: tar.TypeReg}, "fine")
	add(&tar.Header{Name: "out/link", Typeflag: tar.TypeSymlink, Linkname: "report.txt"}, "")
	add(&tar.Header{Name: "out/hard", Typeflag: tar.TypeLink, Linkname: "out/report.txt"}, "")
	add(&tar.Header{Name: "out/../../etc/cron.d/evil", Typeflag: tar.TypeReg}, "evil")
	add(&tar.Header{Name: "/etc/passwd", Typeflag: tar.TypeReg}, "evil")
	add(&tar.Header{Name: "other/x", Typeflag: tar.TypeReg}, "evil")
	add(&tar.Header{Name: "out/sda", Typeflag: tar.TypeBlock, Devmajor: 8}, "")
	add(&tar.Header{Name: "out/fifo", Typeflag: tar.TypeFifo}, "")
	add(&tar.Header{Name: "out/shadow", Typeflag: tar.TypeLink, Linkname: "/etc/shadow"}, "")
	add(&tar.Header{Name: "out/up", Typeflag: tar.TypeLink, Linkname: "out/../../x"}, "")
	tw.Close()

	var out bytes.Buffer
	if err := safeTar(&in, &out, "out"); err != nil {
		t.Fatal(err)
	}
	var names []string
	tr := tar.NewReader(&out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if body, _ := io.ReadAll(tr); string(body) == "evil" {
			t.Errorf("%s carried a hostile entry's bytes", h.Name)
		}
	}
	if want := []string{"out/", "out/report.txt", "out/link", "out/hard"}; !slices.Equal(names, want) {
		t.Errorf("entries passed on: %q, want %q", names, want)
	}
}
