package executor

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/executor/process"
)

// Hello reports the executor's version and capabilities.
func (s *Server) Hello(ctx context.Context, req *connect.Request[executorv1.HelloRequest]) (*connect.Response[executorv1.HelloResponse], error) {
	return connect.NewResponse(&executorv1.HelloResponse{
		Version:         Version,
		ApiVersion:      APIVersion,
		Capabilities:    s.capabilities(),
		StartedUnixNano: s.started.UnixNano(),
		Pid:             int32(os.Getpid()),
		Display:         s.helloDisplay(),
	}), nil
}

// Health answers as soon as the executor serves calls.
func (s *Server) Health(ctx context.Context, req *connect.Request[executorv1.HealthRequest]) (*connect.Response[executorv1.HealthResponse], error) {
	return connect.NewResponse(&executorv1.HealthResponse{}), nil
}

// Sync flushes the sandbox's cached writes to its disk (sync(2)), so that
// the host reads what the sandbox wrote: gVisor keeps writes in its own
// page cache until then. Not activity: the service asks it before it saves
// an idle sandbox.
func (s *Server) Sync(ctx context.Context, req *connect.Request[executorv1.SyncRequest]) (*connect.Response[executorv1.SyncResponse], error) {
	syscall.Sync()
	return connect.NewResponse(&executorv1.SyncResponse{}), nil
}

// LastActivity is the last time a call arrived, a process wrote output or
// exited; while any process started by Exec runs, it is now.
func (s *Server) LastActivity() time.Time {
	if s.procs.Running() > 0 {
		return time.Now()
	}
	return process.WallTime(time.Duration(s.activity.Load()))
}

// Usage reports the sandbox's resource use as seen from inside: from its
// cgroup when one is visible, otherwise from /proc (which gVisor scopes to
// the sandbox).
func (s *Server) Usage(ctx context.Context, req *connect.Request[executorv1.UsageRequest]) (*connect.Response[executorv1.UsageResponse], error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(s.fs.HostPath("/"), &st); err != nil {
		return nil, err
	}
	running := s.procs.Running()
	return connect.NewResponse(&executorv1.UsageResponse{
		MemoryBytes:          memoryUsed(),
		CpuSeconds:           cpuSeconds(),
		Processes:            processCount(),
		DiskUsedBytes:        (st.Blocks - st.Bfree) * uint64(st.Bsize),
		DiskTotalBytes:       st.Blocks * uint64(st.Bsize),
		ExecutorRssBytes:     ownRSS(),
		LastActivityUnixNano: s.LastActivity().UnixNano(),
		RunningExecs:         uint32(running),
	}), nil
}

func readUint(path string) (uint64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
	return v, err == nil
}

// memoryUsed is the memory charged to the sandbox: its cgroup's (v2, then
// v1) or, without one, what /proc/meminfo says is not available.
func memoryUsed() uint64 {
	if v, ok := readUint("/sys/fs/cgroup/memory.current"); ok {
		return v
	}
	if v, ok := readUint("/sys/fs/cgroup/memory/memory.usage_in_bytes"); ok {
		return v
	}
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	var total, avail uint64
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseUint(f[1], 10, 64)
		switch f[0] {
		case "MemTotal:":
			total = v * 1024
		case "MemAvailable:":
			avail = v * 1024
		}
	}
	if avail > total {
		return 0
	}
	return total - avail
}

// cpuSeconds is the CPU time used so far: the cgroup's, or the busy time in
// /proc/stat.
func cpuSeconds() float64 {
	if b, err := os.ReadFile("/sys/fs/cgroup/cpu.stat"); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				return float64(n) / 1e6
			}
		}
	}
	if v, ok := readUint("/sys/fs/cgroup/cpuacct/cpuacct.usage"); ok {
		return float64(v) / 1e9
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var ticks uint64
	for i, v := range f {
		// user nice system idle iowait irq softirq steal: all but idle and iowait
		if i == 0 || i == 4 || i == 5 || i > 8 {
			continue
		}
		n, _ := strconv.ParseUint(v, 10, 64)
		ticks += n
	}
	return float64(ticks) / 100 // USER_HZ
}

// processCount is the number of processes alive, the executor excluded.
func processCount() uint32 {
	d, err := os.Open("/proc")
	if err != nil {
		return 0
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	n := uint32(0)
	for _, name := range names {
		if name != "" && name[0] >= '0' && name[0] <= '9' {
			n++
		}
	}
	if n > 0 {
		n-- // ourselves
	}
	return n
}

func ownRSS() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}
