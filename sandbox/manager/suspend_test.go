package manager

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/reinsdev/reins/sandbox"
)

// What a gVisor sandbox wrote just before it was suspended is on its disk
// when it wakes, round after round (the disk's filesystem is unmounted and
// mounted again each time; see rootfs.TestRemountWaitsForTheDetachedFilesystem
// for a disk whose old filesystem was still held).
func TestSuspendKeepsWrittenData(t *testing.T) {
	dir, exe, gv := newGvisor(t)
	m := realManager(t, dir, exe, "gvisor", gv)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	info, err := m.Create(ctx, "", sandbox.Spec{Image: "busybox"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(context.Background(), "", info.ID)
	for round := range 5 {
		c, err := m.Client(ctx, "", info.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("round %d: written just before the suspend", round)
		if err := c.WriteFile(ctx, "/workspace/kept.txt", []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := c.Run(ctx, "sh", "-c", fmt.Sprintf("echo %d >> /workspace/log.txt", round)); err != nil {
			t.Fatal(err)
		}
		if err := m.Suspend(ctx, "", info.ID); err != nil {
			t.Fatal(err)
		}
		if woke, err := m.Wake(ctx, "", info.ID); err != nil || !woke {
			t.Fatalf("Wake: %v, %v", woke, err)
		}
		c, err = m.Client(ctx, "", info.ID)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.ReadFile(ctx, "/workspace/kept.txt")
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Fatalf("round %d: after suspend and wake kept.txt holds %q, want %q", round, got, want)
		}
		log, _, _, err := c.Run(ctx, "cat", "/workspace/log.txt")
		if err != nil {
			t.Fatal(err)
		}
		if n := len(log); n != 2*(round+1) {
			t.Fatalf("round %d: log.txt after wake is %q", round, log)
		}
	}
}
