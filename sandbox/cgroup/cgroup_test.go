package cgroup

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReadKV(t *testing.T) {
	p := filepath.Join(t.TempDir(), "memory.oom_control")
	if err := os.WriteFile(p, []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	kv, err := readKV(p)
	if err != nil || kv["oom_kill"] != 3 || kv["under_oom"] != 0 {
		t.Fatalf("readKV = %v, %v", kv, err)
	}
}

func TestMissingGroup(t *testing.T) {
	g := Open("/reins/no-such-group-for-test")
	if g.Exists() {
		t.Fatal("a group that was never made exists")
	}
	if err := g.Remove(); err != nil {
		t.Fatalf("Remove of a missing group: %v", err)
	}
	if _, err := g.OOMKills(); !os.IsNotExist(err) {
		t.Fatalf("OOMKills of a missing group: %v, want not exist", err)
	}
}
