package archive_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/reinsdev/reins/archive"
)

// FuzzExtract feeds the extractor arbitrary streams, in cp mode and in
// layer mode, into a directory that already holds a file, beside a
// directory that must stay untouched. Whatever the stream, nothing may be
// written outside the destination, no device node (but a whiteout) or fifo
// made, no set-user-ID file planted by cp, and the file already there kept
// unless an entry of its name replaced it. Seeds: testdata/fuzz/FuzzExtract
// and the hostile archives of TestExtractHostile.
//
//	go test ./archive -run '^$' -fuzz FuzzExtract -fuzztime 60s
func FuzzExtract(f *testing.F) {
	for _, tc := range hostileCases() {
		b := tc.tar(newHostile(f), "/dst", "/outside").bytes()
		f.Add(false, b)
		f.Add(true, b)
	}
	f.Fuzz(func(t *testing.T, layer bool, data []byte) {
		parent := t.TempDir()
		outside, dst := filepath.Join(parent, "outside"), filepath.Join(parent, "dst")
		must(t, os.MkdirAll(filepath.Join(outside, "sub"), 0o755))
		must(t, os.WriteFile(filepath.Join(outside, "victim"), []byte("safe"), 0o644))
		must(t, os.MkdirAll(dst, 0o755))
		opts := archive.Options{MaxBytes: 1 << 20, MaxEntries: 1000}
		if layer {
			opts.Layer, opts.Whiteouts = true, archive.OverlayWhiteouts
		}
		opts.Extract(bytes.NewReader(data), dst)

		if b, err := os.ReadFile(filepath.Join(outside, "victim")); string(b) != "safe" {
			t.Fatalf("outside/victim = %q, %v", b, err)
		}
		if ents, _ := os.ReadDir(outside); len(ents) != 2 {
			t.Fatalf("outside holds %v", ents)
		}
		if ents, _ := os.ReadDir(filepath.Join(outside, "sub")); len(ents) != 0 {
			t.Fatalf("outside/sub holds %v", ents)
		}
		if ents, _ := os.ReadDir(parent); len(ents) != 2 {
			t.Fatalf("beside the destination: %v", ents)
		}
		filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return nil
			}
			m := fi.Mode()
			st, _ := fi.Sys().(*syscall.Stat_t)
			switch {
			case m&fs.ModeNamedPipe != 0, m&fs.ModeSocket != 0, m&fs.ModeDevice != 0 && m&fs.ModeCharDevice == 0:
				t.Errorf("%s is a %v", p, m)
			case m&fs.ModeCharDevice != 0 && (!layer || st == nil || st.Rdev != 0):
				t.Errorf("%s is a character device that is no whiteout", p)
			case !layer && m&(fs.ModeSetuid|fs.ModeSetgid) != 0 && !m.IsDir():
				t.Errorf("%s is %v: cp planted a set-id bit", p, m)
			}
			if m.IsDir() && m.Perm()&0o700 != 0o700 {
				os.Chmod(p, 0o755) // let t.TempDir clean up
			}
			return nil
		})
	})
}
