package main

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/rootfs"
	"github.com/reinsdev/reins/sandbox/workspace"
)

// workspace: capture and restore of a sandbox's upper layer (a real ext4
// loop disk, as the manager mounts it) of 1 MiB, 100 MiB and 1 GiB, half
// in many small files and half in a few big ones, beside GNU tar of the
// same tree in the same run: `tar -c` (xattrs, sparse) into a file on the
// same host disk as the store, fsynced (a capture syncs its chunks too),
// and `tar -x` into a fresh disk like the restore's. Then a second
// capture after changing 1% of the 1 GiB tree, with and without a parent,
// beside GNU tar's own incremental mode (--listed-incremental, level 1).
var wsSizes = flag.String("ws-mib", "1,100,1024", "workspace bench: tree sizes in MiB (the second capture runs on a 1024)")

func (b *bench) workspace() error {
	base, err := os.MkdirTemp("/var/tmp", "rbench-ws")
	if err != nil {
		return err
	}
	defer os.RemoveAll(base)
	var disks []rootfs.Layout
	defer func() {
		for _, l := range disks {
			rootfs.Remove(l)
		}
	}()
	mkdisk := func(name string, size int64) (string, error) {
		l := rootfs.Layout{Dir: filepath.Join(base, name)}
		disks = append(disks, l)
		if err := rootfs.CreateDisk(b.ctx, l, size); err != nil {
			return "", err
		}
		return l.Upper(), rootfs.MountDisk(l)
	}
	st, err := workspace.Open(filepath.Join(base, "store"))
	if err != nil {
		return err
	}
	defer st.Close()
	var sizes []int64
	for _, f := range strings.Split(*wsSizes, ",") {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("-ws-mib %q: want sizes in MiB, comma-separated", *wsSizes)
		}
		sizes = append(sizes, n<<20)
	}
	for _, size := range sizes {
		disk := 3*size + 256<<20
		src, err := mkdisk(fmt.Sprintf("src%d", size>>20), disk)
		if err != nil {
			return err
		}
		files, err := benchTree(src, size, "tree")
		if err != nil {
			return err
		}
		rounds := 3
		if size >= 1<<30 {
			rounds = 1
		}
		var capt, tarc, rest, tarx []time.Duration
		var snap workspace.Snapshot
		for r := 0; r < rounds; r++ {
			// Ours into a fresh store each round (everything new), then
			// tar: interleaved, so the machine's load falls on both.
			s, err := workspace.Open(filepath.Join(base, fmt.Sprintf("store-%d-%d", size>>20, r)))
			if err != nil {
				return err
			}
			// Dirty pages left by writing the tree or an earlier round's
			// restore would be flushed by the capture's syncfs (the store
			// and the loop disks' images share the host's filesystem):
			// flush them first, for ours and tar's alike.
			syscall.Sync()
			t0 := time.Now()
			snap, err = s.Capture(b.ctx, src, workspace.CaptureOptions{})
			if err != nil {
				s.Close()
				return err
			}
			capt = append(capt, time.Since(t0))
			archive := filepath.Join(base, fmt.Sprintf("tree-%d.tar", r))
			syscall.Sync()
			d, err := tarCreate(src, archive, "")
			if err != nil {
				s.Close()
				return err
			}
			tarc = append(tarc, d)
			dst, err := mkdisk(fmt.Sprintf("dst%d-%d", size>>20, r), disk)
			if err != nil {
				s.Close()
				return err
			}
			t0 = time.Now()
			if err := s.Restore(b.ctx, snap.Digest, dst, nil); err != nil {
				s.Close()
				return err
			}
			rest = append(rest, time.Since(t0))
			tdst, err := mkdisk(fmt.Sprintf("tdst%d-%d", size>>20, r), disk)
			if err != nil {
				s.Close()
				return err
			}
			t0 = time.Now()
			if out, err := exec.Command("tar", "-x", "--xattrs", "--xattrs-include=*", "--numeric-owner", "-f", archive, "-C", tdst).CombinedOutput(); err != nil {
				s.Close()
				return fmt.Errorf("tar -x: %v: %s", err, out)
			}
			tarx = append(tarx, time.Since(t0))
			s.Close()
			os.RemoveAll(filepath.Join(base, fmt.Sprintf("store-%d-%d", size>>20, r)))
			os.Remove(archive)
			for _, l := range disks[len(disks)-2:] {
				rootfs.Remove(l)
			}
			disks = disks[:len(disks)-2]
		}
		label := fmt.Sprintf("%s (%d files)", sandbox.FormatBytes(size), files)
		c, tc, re, tx := pct(capt, 50), pct(tarc, 50), pct(rest, 50), pct(tarx, 50)
		b.add("workspace capture, "+label, rate(c, snap.Bytes), rate(tc, snap.Bytes)+" `tar -c` + fsync", ratio(c, tc), "≤ 1.5×")
		b.add("workspace restore, "+label, rate(re, snap.Bytes), rate(tx, snap.Bytes)+" `tar -x`", ratio(re, tx), "≤ 1.5×")
		if size == 1<<30 {
			if err := b.workspaceSecond(st, src, base, size); err != nil {
				return err
			}
		}
	}
	return nil
}

// workspaceSecond: capture the tree, change 1% of it (1% of the small
// files rewritten, a 4 KiB write in 1% of the big files' MiB cells),
// capture again, with the first as parent and without; GNU tar's
// incremental mode beside it.
func (b *bench) workspaceSecond(st *workspace.Store, src, base string, size int64) error {
	first, err := st.Capture(b.ctx, src, workspace.CaptureOptions{})
	if err != nil {
		return err
	}
	snar := filepath.Join(base, "tree.snar")
	if _, err := tarCreate(src, filepath.Join(base, "level0.tar"), snar); err != nil {
		return err
	}
	os.Remove(filepath.Join(base, "level0.tar"))
	changed, err := changeTree(src, size)
	if err != nil {
		return err
	}
	syscall.Sync()
	t0 := time.Now()
	withParent, err := st.Capture(b.ctx, src, workspace.CaptureOptions{Parent: first.Digest})
	if err != nil {
		return err
	}
	dp := time.Since(t0)
	level1 := filepath.Join(base, "level1.tar")
	syscall.Sync()
	dt, err := tarCreate(src, level1, snar)
	if err != nil {
		return err
	}
	fi, err := os.Stat(level1)
	if err != nil {
		return err
	}
	syscall.Sync()
	t0 = time.Now()
	noParent, err := st.Capture(b.ctx, src, workspace.CaptureOptions{})
	if err != nil {
		return err
	}
	dn := time.Since(t0)
	if noParent.Digest != withParent.Digest {
		return fmt.Errorf("the captures with and without a parent differ: %s, %s", withParent.Digest, noParent.Digest)
	}
	tarDesc := fmt.Sprintf("%s, %s archive, `tar --listed-incremental` level 1", ms(dt), sandbox.FormatBytes(fi.Size()))
	what := fmt.Sprintf("workspace second capture of %s, 1%% of its small files and of its big files' MiB cells changed (%s written)", sandbox.FormatBytes(size), sandbox.FormatBytes(changed))
	b.add(what+", with parent",
		fmt.Sprintf("%s, stored %s", ms(dp), sandbox.FormatBytes(withParent.StoredBytes)), tarDesc, ratio(dp, dt), "stores only what changed")
	b.add(what+", no parent (reads all, dedup)",
		fmt.Sprintf("%s, stored %s", ms(dn), sandbox.FormatBytes(noParent.StoredBytes)), tarDesc, ratio(dn, dt), "")
	return nil
}

// benchTree writes about size bytes under dir: half in small files
// (0.5-16 KiB, 100 to a directory), half in big ones (8 MiB, or one
// file for small trees). It returns the number of files.
func benchTree(dir string, size int64, seed string) (int, error) {
	files := 0
	var small int64
	for i := 0; small < size/2; i++ {
		n := int64(512 + (i*7919)%(16<<10))
		p := filepath.Join(dir, "src", fmt.Sprintf("d%04d", i/100), fmt.Sprintf("f%03d.txt", i%100))
		if err := writeBench(p, benchBytes(fmt.Sprintf("%s/s%d", seed, i), n)); err != nil {
			return 0, err
		}
		small += n
		files++
	}
	bigSize := min(size/2, 8<<20)
	for i := 0; int64(i)*bigSize < size/2; i++ {
		p := filepath.Join(dir, "data", fmt.Sprintf("big%03d.bin", i))
		if err := writeBench(p, benchBytes(fmt.Sprintf("%s/b%d", seed, i), bigSize)); err != nil {
			return 0, err
		}
		files++
	}
	return files, nil
}

// changeTree changes about 1% of a benchTree of size bytes and returns the
// bytes written.
func changeTree(dir string, size int64) (int64, error) {
	var changed int64
	for i := 0; ; i += 100 {
		p := filepath.Join(dir, "src", fmt.Sprintf("d%04d", i/100), fmt.Sprintf("f%03d.txt", i%100))
		fi, err := os.Stat(p)
		if os.IsNotExist(err) {
			break
		}
		if err != nil {
			return 0, err
		}
		if err := writeBench(p, benchBytes(fmt.Sprintf("changed/%d", i), fi.Size())); err != nil {
			return 0, err
		}
		changed += fi.Size()
	}
	// A 4 KiB write in every 100th MiB cell of the big files.
	bigs, _ := filepath.Glob(filepath.Join(dir, "data", "big*.bin"))
	cell := 0
	for i, p := range bigs {
		fi, err := os.Stat(p)
		if err != nil {
			return 0, err
		}
		for off := int64(0); off < fi.Size(); off += 1 << 20 {
			if cell++; cell%100 != 1 {
				continue
			}
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				return 0, err
			}
			_, err = f.WriteAt(benchBytes(fmt.Sprintf("cell/%d/%d", i, off), 4096), off+1000)
			f.Close()
			if err != nil {
				return 0, err
			}
			changed += 4096
		}
	}
	return changed, nil
}

func writeBench(p string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o644)
}

// benchBytes is n bytes of incompressible content named by seed.
func benchBytes(seed string, n int64) []byte {
	out := make([]byte, 0, n+32)
	h := sha256.Sum256([]byte(seed))
	for int64(len(out)) < n {
		out = append(out, h[:]...)
		h = sha256.Sum256(h[:])
	}
	return out[:n]
}

// tarCreate runs GNU tar -c of dir into archive (incremental against snar
// if given) and fsyncs the archive, returning the time of both.
func tarCreate(dir, archive, snar string) (time.Duration, error) {
	args := []string{"-c", "--xattrs", "--xattrs-include=*", "--sparse", "--numeric-owner", "-f", archive}
	if snar != "" {
		args = append(args, "--listed-incremental="+snar)
	}
	args = append(args, "-C", dir, ".")
	t0 := time.Now()
	if out, err := exec.CommandContext(context.Background(), "tar", args...).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("tar -c: %v: %s", err, out)
	}
	f, err := os.OpenFile(archive, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	err = f.Sync()
	f.Close()
	return time.Since(t0), err
}

func rate(d time.Duration, n int64) string {
	return fmt.Sprintf("%s (%.0f MiB/s)", ms(d), float64(n)/(1<<20)/d.Seconds())
}
