package oci

import (
	"errors"
	"slices"
	"testing"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

func TestSpec(t *testing.T) {
	s, err := Spec(sandbox.Bundle{
		ID: "sb1", Rootfs: "/var/lib/reins/sb1/rootfs", Args: []string{"/reins/executor"},
		Env: []string{"A=1"}, Cwd: "/work", Hostname: "box",
		Mounts: []sandbox.Mount{{Source: "/host/ctl", Target: "/run/reins"}, {Source: "/host/bin", Target: "/reins", ReadOnly: true}},
		Limits: sandbox.Limits{CPUs: 1.5, MemoryBytes: 128 << 20, Pids: 100},
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Root.Path != "/var/lib/reins/sb1/rootfs" || s.Root.Readonly {
		t.Errorf("root = %+v, want the rootfs, writable", s.Root)
	}
	if s.Process.Cwd != "/work" || s.Process.Terminal || !s.Process.NoNewPrivileges || s.Hostname != "box" {
		t.Errorf("process = %+v, hostname %q", s.Process, s.Hostname)
	}
	if !slices.Contains(s.Process.Env, "A=1") || !slices.ContainsFunc(s.Process.Env, func(e string) bool { return len(e) > 5 && e[:5] == "PATH=" }) {
		t.Errorf("env = %v, want A=1 and a PATH", s.Process.Env)
	}
	if slices.Contains(s.Process.Capabilities.Bounding, "CAP_SYS_ADMIN") {
		t.Errorf("capabilities include CAP_SYS_ADMIN")
	}
	if s.Linux.CgroupsPath != "/reins/sb1" {
		t.Errorf("cgroupsPath = %q", s.Linux.CgroupsPath)
	}
	r := s.Linux.Resources
	if *r.CPU.Quota != 150000 || *r.CPU.Period != 100000 {
		t.Errorf("cpu = %d/%d, want 150000/100000", *r.CPU.Quota, *r.CPU.Period)
	}
	if *r.Memory.Limit != 128<<20 || *r.Memory.Swap != 128<<20 {
		t.Errorf("memory = %d, swap %d: want both 128 MiB", *r.Memory.Limit, *r.Memory.Swap)
	}
	if r.Pids.Limit != 100 {
		t.Errorf("pids = %d", r.Pids.Limit)
	}
	var ns []string
	for _, n := range s.Linux.Namespaces {
		ns = append(ns, string(n.Type))
	}
	for _, want := range []string{"pid", "ipc", "uts", "mount", "network"} {
		if !slices.Contains(ns, want) {
			t.Errorf("namespaces %v lack %s", ns, want)
		}
	}
	byDest := map[string][]string{}
	for _, m := range s.Mounts {
		byDest[m.Destination] = m.Options
	}
	if !slices.Contains(byDest["/reins"], "ro") || !slices.Contains(byDest["/run/reins"], "rw") || !slices.Contains(byDest["/sys"], "ro") {
		t.Errorf("mount options = %v", byDest)
	}
	for _, d := range []string{"/proc", "/dev", "/dev/pts", "/dev/shm"} {
		if _, ok := byDest[d]; !ok {
			t.Errorf("no %s mount", d)
		}
	}
}

func TestSpecRejects(t *testing.T) {
	for name, b := range map[string]sandbox.Bundle{
		"bad id":        {ID: "../x", Rootfs: "/r", Args: []string{"a"}},
		"no args":       {ID: "a", Rootfs: "/r"},
		"relative root": {ID: "a", Rootfs: "r", Args: []string{"a"}},
		"relative src":  {ID: "a", Rootfs: "/r", Args: []string{"a"}, Mounts: []sandbox.Mount{{Source: "x", Target: "/x"}}},
	} {
		if _, err := Spec(b); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument", name, err)
		}
	}
}
