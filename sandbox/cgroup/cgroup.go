// Package cgroup reads what the kernel counts for a sandbox's control group:
// memory, CPU time, tasks and OOM kills. It understands cgroup v1 (one
// hierarchy per controller, as on hybrid hosts) and v2 (one unified
// hierarchy). It only reads and removes groups; the OCI runtimes create them.
package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Root is where the cgroup hierarchies are mounted.
const Root = "/sys/fs/cgroup"

// Stats is a group's resource use.
type Stats struct {
	MemoryBytes uint64 // in use, less the inactive page cache the kernel can drop
	// PeakMemoryBytes is the most the group has had charged to it since
	// it was made (v2 memory.peak, v1 memory.max_usage_in_bytes), page
	// cache included, as the limit counts it; 0 where the kernel keeps
	// no peak (v2 before Linux 5.19).
	PeakMemoryBytes uint64
	CPUSeconds      float64
	Pids            uint64
	OOMKills        int // processes the OOM killer killed in the group
}

// Group is one control group, named by its path below each hierarchy's root
// (e.g. /reins/sb1).
type Group struct {
	path string
	v2   bool
}

// Open returns the group at path. It does not check the group exists.
func Open(path string) *Group {
	return &Group{path: path, v2: Unified()}
}

// Unified reports whether the memory controller is on a cgroup v2 hierarchy
// mounted at Root (a pure v2 host), rather than on v1 (a v1 or hybrid host).
func Unified() bool {
	_, err := os.Stat(filepath.Join(Root, "cgroup.controllers"))
	return err == nil
}

// Dirs lists the directories the group has, in every hierarchy where it
// exists.
func (g *Group) Dirs() []string {
	if g.v2 {
		d := filepath.Join(Root, g.path)
		if isDir(d) {
			return []string{d}
		}
		return nil
	}
	hs, _ := os.ReadDir(Root)
	var out []string
	for _, h := range hs {
		d := filepath.Join(Root, h.Name(), g.path)
		if h.IsDir() && isDir(d) {
			out = append(out, d)
		}
	}
	return out
}

// Exists reports whether the group exists in any hierarchy.
func (g *Group) Exists() bool { return len(g.Dirs()) > 0 }

// Remove removes the group's directories, deepest first. The group must
// have no processes left; a missing group is not an error.
func (g *Group) Remove() error {
	var errs []error
	for _, d := range g.Dirs() {
		var sub []string
		_ = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				sub = append(sub, p)
			}
			return nil
		})
		for i := len(sub) - 1; i >= 0; i-- {
			if err := rmdir(sub[i]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// rmdir retries a little: a group whose last task has just died may be
// busy for a moment.
func rmdir(d string) error {
	var err error
	for i := 0; i < 50; i++ {
		err = syscall.Rmdir(d)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", d, err)
}

// OOMKills returns how many processes the OOM killer killed in the group.
func (g *Group) OOMKills() (int, error) {
	var (
		kv  map[string]uint64
		err error
	)
	if g.v2 {
		kv, err = readKV(filepath.Join(Root, g.path, "memory.events"))
	} else {
		kv, err = readKV(filepath.Join(Root, "memory", g.path, "memory.oom_control"))
	}
	if err != nil {
		return 0, err
	}
	return int(kv["oom_kill"]), nil
}

// Stats reads the group's resource use.
func (g *Group) Stats() (Stats, error) {
	if g.v2 {
		return g.statsV2()
	}
	return g.statsV1()
}

func (g *Group) statsV1() (Stats, error) {
	var s Stats
	mem := filepath.Join(Root, "memory", g.path)
	usage, err := readUint(filepath.Join(mem, "memory.usage_in_bytes"))
	if err != nil {
		return s, err
	}
	ms, err := readKV(filepath.Join(mem, "memory.stat"))
	if err != nil {
		return s, err
	}
	s.MemoryBytes = sub(usage, ms["total_inactive_file"])
	if s.PeakMemoryBytes, err = readUint(filepath.Join(mem, "memory.max_usage_in_bytes")); err != nil {
		return s, err
	}
	cpu, err := readUint(filepath.Join(v1Dir("cpuacct"), g.path, "cpuacct.usage"))
	if err != nil {
		return s, err
	}
	s.CPUSeconds = float64(cpu) / 1e9
	if s.Pids, err = readUint(filepath.Join(Root, "pids", g.path, "pids.current")); err != nil {
		return s, err
	}
	s.OOMKills, err = g.OOMKills()
	return s, err
}

func (g *Group) statsV2() (Stats, error) {
	var s Stats
	d := filepath.Join(Root, g.path)
	usage, err := readUint(filepath.Join(d, "memory.current"))
	if err != nil {
		return s, err
	}
	ms, err := readKV(filepath.Join(d, "memory.stat"))
	if err != nil {
		return s, err
	}
	s.MemoryBytes = sub(usage, ms["inactive_file"])
	if s.PeakMemoryBytes, err = readUint(filepath.Join(d, "memory.peak")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return s, err
	}
	cs, err := readKV(filepath.Join(d, "cpu.stat"))
	if err != nil {
		return s, err
	}
	s.CPUSeconds = float64(cs["usage_usec"]) / 1e6
	if s.Pids, err = readUint(filepath.Join(d, "pids.current")); err != nil {
		return s, err
	}
	s.OOMKills, err = g.OOMKills()
	return s, err
}

// v1Dir finds a v1 controller's hierarchy, which some hosts co-mount
// (cpu,cpuacct).
func v1Dir(ctrl string) string {
	for _, n := range []string{ctrl, "cpu,cpuacct", "cpuacct,cpu"} {
		if d := filepath.Join(Root, n); isDir(d) {
			return d
		}
	}
	return filepath.Join(Root, ctrl)
}

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func readUint(p string) (uint64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p, err)
	}
	return v, nil
}

// readKV reads a flat-keyed file of "key value" lines.
func readKV(p string) (map[string]uint64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	kv := make(map[string]uint64)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			kv[k] = n
		}
	}
	return kv, nil
}
