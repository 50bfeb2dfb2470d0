package workspace

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkCapture captures a tree of 6 000 small files and 50 MiB of big
// ones into a fresh store each time (every chunk new).
func BenchmarkCapture(b *testing.B) {
	src := disk(b, 512<<20)
	for i := 0; i < 6000; i++ {
		writeFile(b, filepath.Join(src, fmt.Sprintf("d%02d/f%04d", i/100, i)), pattern(fmt.Sprint(i), 512+(i*7919)%(16<<10)), 0o644)
	}
	for i := 0; i < 6; i++ {
		writeFile(b, filepath.Join(src, fmt.Sprintf("big%d", i)), pattern(fmt.Sprint("big", i), 8<<20), 0o644)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := store(b, filepath.Join(b.TempDir(), fmt.Sprintf("ws%d", i)))
		if _, err := s.Capture(context.Background(), src, CaptureOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
