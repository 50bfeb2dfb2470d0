package e2b

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/reinsdev/reins/api/e2b/envd/process"
)

// TestMetrics: GET /sandboxes/{id}/metrics reports what the sandbox uses,
// as the executor measures it: memory, the disk its files take, and the
// CPU it used since the last sample, as a percent of its CPUs.
func TestMetrics(t *testing.T) {
	e := newEnvd(t)
	sample := func() metric {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctxT(t), "GET", e.url+"/sandboxes/"+e.sandbox+"/metrics", nil)
		req.Header.Set(APIKeyHeader, reins(t).token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got []metric
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != 200 || len(got) != 1 {
			t.Fatalf("metrics: %d %v %+v", resp.StatusCode, err, got)
		}
		return got[0]
	}
	run := func(cmd string) {
		t.Helper()
		stream, err := e.proc.Start(ctxT(t), connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", cmd}}}))
		if err != nil {
			t.Fatal(err)
		}
		for stream.Receive() {
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
	}
	before := sample()
	if before.MemUsed <= 0 || before.MemTotal <= 0 || before.DiskTotal <= 0 || before.CPUCount < 1 {
		t.Fatalf("the first sample: %+v", before)
	}
	// 32 MiB more on disk, and a second of one CPU busy.
	run("head -c 33554432 /dev/urandom > /home/user/big && sync && timeout 1 sh -c 'while :; do :; done'; true")
	after := sample()
	if after.DiskUsed < before.DiskUsed+30<<20 || after.DiskUsed > after.DiskTotal {
		t.Errorf("disk used: %d, then %d after writing 32 MiB (of %d)", before.DiskUsed, after.DiskUsed, after.DiskTotal)
	}
	if after.CPUUsedPct <= 5 || after.CPUUsedPct > 100 {
		t.Errorf("CPU used after a second of a busy loop: %.1f%% of %d CPUs", after.CPUUsedPct, after.CPUCount)
	}
	// Idle now: the next sample, over the quiet second since, is lower.
	run("sleep 1")
	if idle := sample(); idle.CPUUsedPct >= after.CPUUsedPct {
		t.Errorf("CPU used while idle: %.1f%%, after the busy loop %.1f%%", idle.CPUUsedPct, after.CPUUsedPct)
	}
}

// The CPU readings kept are bounded however many sandboxes are sampled,
// and a count that goes back (the executor restarted) is not a negative
// use.
func TestHostileCPUSamples(t *testing.T) {
	var s cpuSamples
	now := time.Now()
	for i := range 2 * maxCPUSamples {
		s.percent(fmt.Sprint("sb", i), 1, now.Add(time.Duration(i)*time.Millisecond), 1)
	}
	if len(s.m) > maxCPUSamples {
		t.Fatalf("%d readings kept, past %d", len(s.m), maxCPUSamples)
	}
	if _, ok := s.m[fmt.Sprint("sb", 2*maxCPUSamples-1)]; !ok {
		t.Fatal("the newest reading was dropped")
	}
	s.percent("x", 10, now, 2)
	if pct, ok := s.percent("x", 11, now.Add(time.Second), 2); !ok || pct != 50 {
		t.Errorf("one CPU second of two CPUs in a second: %v%% %v", pct, ok)
	}
	if pct, ok := s.percent("x", 2, now.Add(2*time.Second), 2); ok || pct != 0 {
		t.Errorf("a count that went back: %v%% %v", pct, ok)
	}
	if pct, ok := s.percent("x", 1e12, now.Add(3*time.Second), 2); pct != 100 || !ok {
		t.Errorf("a lying count: %v%% %v", pct, ok)
	}
	// The count is the executor's, which the sandbox can rewrite: one
	// that is no number of seconds is no reading, and every answer is a
	// percent JSON can carry.
	for i, lie := range []float64{math.Inf(1), math.Inf(1), math.NaN(), math.Inf(-1), -5, 3, math.NaN()} {
		pct, _ := s.percent("y", lie, now.Add(time.Duration(i)*time.Second), 1)
		if math.IsNaN(pct) || pct < 0 || pct > 100 {
			t.Errorf("after a count of %v: %v%%", lie, pct)
		}
		if _, err := json.Marshal(metric{CPUUsedPct: pct}); err != nil {
			t.Errorf("after a count of %v: %v", lie, err)
		}
	}
}
