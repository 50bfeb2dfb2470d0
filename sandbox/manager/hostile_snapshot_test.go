package manager

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/fake"
)

// fakeManager is a manager over the fake backend that can make no
// sandbox (no images): enough for snapshot records and their names.
func fakeManager(t *testing.T) *Manager {
	t.Helper()
	dir := t.TempDir()
	exe := filepath.Join(dir, "reins-executor")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Dir: filepath.Join(dir, "sandboxes"), ExecutorPath: exe, DiskPool: -1,
		Backends: map[string]sandbox.Backend{"fake": fake.New()}, DefaultBackend: "fake", Images: &noImages{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// A tenant's snapshot name never becomes a host path, and names that
// could mean one (or anything but a plain name) are refused before any
// file is read; another tenant's snapshot, by name or by digest, is
// missing exactly as one that never was, and cannot be removed.
func TestHostileSnapshotNames(t *testing.T) {
	m := fakeManager(t)
	ctx := context.Background()
	bad := []string{"", "../x", "a/b", "/etc/passwd", ".hidden", "-x", "UPPER", "x\x00y", strings.Repeat("a", 64), "a b", "sha256:zz"}
	for _, name := range bad {
		if _, err := m.Snapshot(ctx, "beta", "nosuch", name); name != "" && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Snapshot named %q: %v, want invalid argument", name, err)
		}
		if err := m.DeleteSnapshot(ctx, "beta", name); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("DeleteSnapshot %q: %v, want invalid argument", name, err)
		}
		if _, err := m.Create(ctx, "beta", sandbox.Spec{Image: SnapshotPrefix + name}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Create from snapshot:%q: %v, want invalid argument", name, err)
		}
	}

	acme := SnapshotInfo{Tenant: "acme", Name: "base", Digest: "sha256:" + strings.Repeat("ab", 32), Sandbox: "s1",
		Image: "busybox", Layers: []string{"/layers/x"}, CreatedAt: time.Now()}
	if err := m.writeSnapshot(&acme); err != nil {
		t.Fatal(err)
	}
	files, _ := os.ReadDir(filepath.Join(m.cfg.Dir, snapshotDir))
	for _, f := range files {
		if !regexp.MustCompile(`^[0-9a-f]{32}\.json$`).MatchString(f.Name()) {
			t.Errorf("a snapshot record's file is named %q: a tenant's name reached a host path", f.Name())
		}
	}
	missing := func(err error) string {
		return strings.NewReplacer("base", "X", "none", "X", acme.Digest, "D", "sha256:"+strings.Repeat("cd", 32), "D").Replace(err.Error())
	}
	for what, pair := range map[string][2]func() error{
		"create by name": {
			func() error { _, err := m.Create(ctx, "beta", sandbox.Spec{Image: "snapshot:base"}, nil); return err },
			func() error { _, err := m.Create(ctx, "beta", sandbox.Spec{Image: "snapshot:none"}, nil); return err },
		},
		"create by digest": {
			func() error {
				_, err := m.Create(ctx, "beta", sandbox.Spec{Image: SnapshotPrefix + acme.Digest}, nil)
				return err
			},
			func() error {
				_, err := m.Create(ctx, "beta", sandbox.Spec{Image: "snapshot:sha256:" + strings.Repeat("cd", 32)}, nil)
				return err
			},
		},
		"delete": {
			func() error { return m.DeleteSnapshot(ctx, "beta", "base") },
			func() error { return m.DeleteSnapshot(ctx, "beta", "none") },
		},
		"delete as the admin": {
			func() error { return m.DeleteSnapshot(ctx, "", "base") },
			func() error { return m.DeleteSnapshot(ctx, "", "none") },
		},
	} {
		other, none := pair[0](), pair[1]()
		if !errors.Is(other, errdefs.ErrNotFound) || missing(other) != missing(none) {
			t.Errorf("%s of another tenant's snapshot: %v; of a missing one: %v", what, other, none)
		}
	}
	if list, err := m.ListSnapshots(ctx, "beta"); err != nil || len(list) != 0 {
		t.Errorf("beta's snapshots: %v, %v; want none", list, err)
	}
	if list, err := m.ListSnapshots(ctx, "acme"); err != nil || len(list) != 1 || list[0].Name != "base" {
		t.Errorf("acme's snapshots: %v, %v", list, err)
	}
	if _, err := m.Fork(ctx, "beta", "nosuch", MaxFork+1); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a fork of %d: %v, want invalid argument", MaxFork+1, err)
	}
}
