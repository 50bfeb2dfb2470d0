package sandboxtool_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/tool/sandboxtool"
)

// linkFarm is a modified executor whose Glob matches many paths, each a
// symbolic link.
type linkFarm struct {
	sandboxtool.Executor
	n     int
	stats atomic.Int64
}

func (l *linkFarm) Glob(ctx context.Context, pattern, dir string) ([]string, bool, error) {
	paths := make([]string, l.n)
	for i := range paths {
		paths[i] = fmt.Sprintf("/workspace/l%d", i)
	}
	return paths, false, nil
}

func (l *linkFarm) Stat(ctx context.Context, p string) (*executorv1.FileInfo, error) {
	l.stats.Add(1)
	return &executorv1.FileInfo{Path: p, Type: executorv1.FileType_FILE_TYPE_SYMLINK}, nil
}

// TestHostileMatchFilesProblemsBounded: a sandbox full of symbolic links
// matched by the downloads' globs gives a bounded list of problems (each
// becomes an artifact event in the run's log), the rest counted in one,
// and is not stat'ed without end.
func TestHostileMatchFilesProblemsBounded(t *testing.T) {
	const max = 100
	ex := &linkFarm{n: 50000}
	patterns := []string{"/workspace/*", "/workspace/**", "/workspace/l*"}
	files, problems := sandboxtool.MatchFiles(context.Background(), ex, patterns, max)
	if len(files) != 0 {
		t.Fatalf("links were taken as files: %d", len(files))
	}
	if len(problems) > max+1 {
		t.Fatalf("%d problems for %d patterns, past the bound of %d (+1 counting the rest)", len(problems), len(patterns), max)
	}
	if n := ex.stats.Load(); n > 2*max {
		t.Fatalf("%d paths stat'ed for at most %d files and %d problems", n, max, max)
	}
	if len(problems) == 0 {
		t.Fatal("no problem reported")
	}
	t.Logf("last problem: %+v", problems[len(problems)-1])
}
