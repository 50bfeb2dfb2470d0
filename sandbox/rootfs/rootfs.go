// Package rootfs builds a sandbox's root filesystem on the host: an overlay
// whose lower layers are an image's unpacked layers (shared, read-only) and
// whose upper layer lives on the sandbox's own disk.
//
// The disk is a sparse ext4 image file of the sandbox's disk limit, attached
// to a loop device and mounted. That bounds the writable layer (a write past
// the limit gets ENOSPC, the sandbox stays usable), keeps one sandbox's files
// off every other's path, and survives a restart of the service: the disk is
// a plain file that a replacement sandbox can mount again.
//
// Layout of a sandbox directory DIR:
//
//	DIR/disk.img      the disk (sparse)
//	DIR/disk/         where the disk is mounted
//	DIR/disk/upper    the overlay's upper layer: every write of the sandbox
//	DIR/disk/work     overlayfs' work directory
//	DIR/rootfs/       the merged root filesystem
//	DIR/run/          the control directory, bind-mounted into the sandbox
//	                  (on the host's disk, not the sandbox's: see PrepareRun)
//
// All of it needs root.
package rootfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/errdefs"
)

// Layout names the paths of one sandbox directory.
type Layout struct{ Dir string }

func (l Layout) DiskImage() string { return filepath.Join(l.Dir, "disk.img") }
func (l Layout) Disk() string      { return filepath.Join(l.Dir, "disk") }
func (l Layout) Upper() string     { return filepath.Join(l.Dir, "disk", "upper") }
func (l Layout) Work() string      { return filepath.Join(l.Dir, "disk", "work") }
func (l Layout) Run() string       { return filepath.Join(l.Dir, "run") }
func (l Layout) Rootfs() string    { return filepath.Join(l.Dir, "rootfs") }

// MinDisk is the smallest disk we make: ext4 needs room for its own metadata.
const MinDisk = 16 << 20

// CreateDisk makes a sparse ext4 image of size bytes. An existing image is
// kept (it holds a sandbox's files).
func CreateDisk(ctx context.Context, l Layout, size int64) error {
	if size < MinDisk {
		return fmt.Errorf("disk size %d bytes is below the minimum of %d MiB: %w", size, MinDisk>>20, errdefs.ErrInvalidArgument)
	}
	if err := os.MkdirAll(l.Dir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(l.DiskImage(), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(l.DiskImage())
		return fmt.Errorf("sizing disk image: %w", err)
	}
	// No journal: the disk is a sandbox's scratch space and the fastest
	// mkfs matters on the create path. No reserved blocks: the limit the
	// user asked for is the space the sandbox gets.
	cmd := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal",
		"-E", "lazy_itable_init=1,lazy_journal_init=1,root_owner=0:0", l.DiskImage())
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(l.DiskImage())
		if errors.Is(err, exec.ErrNotFound) {
			return fmt.Errorf("mkfs.ext4 not found: install the Debian package e2fsprogs")
		}
		return fmt.Errorf("mkfs.ext4: %v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// MountDisk attaches the disk image to a free loop device and mounts it. The
// loop device is set to clear itself when the disk is unmounted. Mounting a
// disk that is already mounted is a no-op.
func MountDisk(l Layout) error {
	if mounted(l.Disk()) {
		return nil
	}
	if err := os.MkdirAll(l.Disk(), 0o700); err != nil {
		return err
	}
	img, err := os.OpenFile(l.DiskImage(), os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening disk image: %w", err)
	}
	defer img.Close()
	// A filesystem of this disk may still be alive, detached from its
	// mount point but held open (an unmount that found it busy): a second
	// one on the same image would read blocks the first has not written
	// yet, and both would write. Wait for it to go, or refuse.
	if err := waitDetached(img, detachWait); err != nil {
		return err
	}
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening /dev/loop-control (loop devices are needed for sandbox disks): %w", err)
	}
	defer ctl.Close()
	// Another process may take the free device between our asking and our
	// configuring it; then ask again.
	for attempt := 0; attempt < 32; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return fmt.Errorf("finding a free loop device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		loop, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opening %s: %w", dev, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(img.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		err = unix.IoctlLoopConfigure(int(loop.Fd()), &cfg)
		if errors.Is(err, unix.EBUSY) {
			loop.Close()
			continue
		}
		if err != nil {
			loop.Close()
			return fmt.Errorf("attaching disk to %s: %w", dev, err)
		}
		// nosuid and nodev: the disk holds what the sandbox wrote, set-ID
		// programs and device nodes included (its own, kept exactly for
		// its snapshots), and the host must never run or open them. The
		// overlay above it is a mount of its own, so inside the sandbox
		// set-ID programs still work.
		err = unix.Mount(dev, l.Disk(), "ext4", unix.MS_NOATIME|unix.MS_NOSUID|unix.MS_NODEV, "")
		// Closing the device after the mount leaves the mount holding it;
		// with autoclear it is detached at unmount.
		loop.Close()
		if err != nil {
			return fmt.Errorf("mounting %s on %s: %w", dev, l.Disk(), err)
		}
		for _, d := range []string{l.Upper(), l.Work()} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("no free loop device after 32 attempts: %w", errdefs.ErrResourceExhausted)
}

// runFS is the control directory's own filesystem: room for the
// executor's socket and little else, so a sandbox cannot fill the host's
// disk through it, nor leave a setuid file or a device node on the host.
const runFS = "size=64k,nr_inodes=16,mode=0700"

// PrepareRun makes the sandbox's control directory anew: an empty tmpfs of
// its own (runFS; nosuid, nodev) in the sandbox's host-only
// directory. The sandbox writes in it (its executor makes its socket
// there), so the host never follows a name in it, and whatever an earlier
// life of the sandbox left there is gone with the old mount. The sandbox
// sees only a bind mount of it, so it cannot replace the directory itself.
func PrepareRun(l Layout) error {
	if err := unmount(l.Run()); err != nil {
		return err
	}
	if err := os.RemoveAll(l.Run()); err != nil {
		return fmt.Errorf("clearing the sandbox's control directory: %w", err)
	}
	if err := os.Mkdir(l.Run(), 0o700); err != nil {
		return fmt.Errorf("making the sandbox's control directory: %w", err)
	}
	// nosuid and nodev, as every bind mount into a sandbox is (a runtime
	// that remounts the bind in a user namespace must keep the flags the
	// source has, and keeps these two).
	if err := unix.Mount("reins-run", l.Run(), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, runFS); err != nil {
		return fmt.Errorf("mounting the sandbox's control directory: %w", err)
	}
	return nil
}

// MountOverlay mounts the merged root filesystem: layers (lowest first) under
// the sandbox's upper layer.
func MountOverlay(l Layout, layers []string) error {
	if mounted(l.Rootfs()) {
		return nil
	}
	if len(layers) == 0 {
		return fmt.Errorf("image has no layers: %w", errdefs.ErrInvalidArgument)
	}
	if err := os.MkdirAll(l.Rootfs(), 0o755); err != nil {
		return err
	}
	fd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("overlayfs is not available: %w", err)
	}
	defer unix.Close(fd)
	fail := func(what string, err error) error {
		return fmt.Errorf("mounting overlay (%s): %w%s", what, err, FsLog(fd))
	}
	// "lowerdir+" adds one layer at a time (no page-size limit on the
	// option string); the first one given is the top-most.
	for i := len(layers) - 1; i >= 0; i-- {
		if err := unix.FsconfigSetString(fd, "lowerdir+", layers[i]); err != nil {
			if i == len(layers)-1 && errors.Is(err, unix.EINVAL) {
				return mountOverlayLegacy(l, layers)
			}
			return fail("layer "+layers[i], err)
		}
	}
	for k, v := range map[string]string{"upperdir": l.Upper(), "workdir": l.Work()} {
		if err := unix.FsconfigSetString(fd, k, v); err != nil {
			return fail(k, err)
		}
	}
	if err := unix.FsconfigCreate(fd); err != nil {
		return fail("create", err)
	}
	mfd, err := unix.Fsmount(fd, unix.FSMOUNT_CLOEXEC, 0)
	if err != nil {
		return fail("fsmount", err)
	}
	defer unix.Close(mfd)
	if err := unix.MoveMount(mfd, "", unix.AT_FDCWD, l.Rootfs(), unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fail("move_mount", err)
	}
	return nil
}

// mountOverlayLegacy is for kernels before 6.8, which lack "lowerdir+".
func mountOverlayLegacy(l Layout, layers []string) error {
	rev := make([]string, len(layers))
	for i, d := range layers {
		rev[len(layers)-1-i] = d
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", strings.Join(rev, ":"), l.Upper(), l.Work())
	if err := unix.Mount("overlay", l.Rootfs(), "overlay", 0, opts); err != nil {
		return fmt.Errorf("mounting overlay: %w", err)
	}
	return nil
}

// FsLog drains the messages the kernel left on a filesystem context (an
// fsopen descriptor) after a failed fsconfig or fsmount, for an error.
func FsLog(fd int) string {
	buf := make([]byte, 512)
	var msgs []string
	for {
		n, err := unix.Read(fd, buf)
		if err != nil || n <= 0 {
			break
		}
		msgs = append(msgs, strings.TrimSpace(string(buf[:n])))
	}
	if len(msgs) == 0 {
		return ""
	}
	return " (" + strings.Join(msgs, "; ") + ")"
}

// Unmount unmounts the root filesystem, the disk and the control
// directory, leaving the disk image in place. Unmounting what is not mounted is not an error.
func Unmount(l Layout) error {
	var errs []error
	for _, p := range []string{l.Rootfs(), l.Disk(), l.Run()} {
		if err := unmount(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Remove unmounts everything and deletes the sandbox directory.
func Remove(l Layout) error {
	if err := Unmount(l); err != nil {
		return err
	}
	return os.RemoveAll(l.Dir)
}

// busyWait is how long an unmount that finds its filesystem busy (a
// runtime tearing down, a transfer finishing) tries again before it
// detaches it instead; detachWait is how long mounting a disk waits for a
// detached filesystem of it to be let go.
var (
	busyWait   = 5 * time.Second
	detachWait = 15 * time.Second
)

func unmount(p string) error {
	deadline := time.Now().Add(busyWait)
	for mounted(p) {
		err := unix.Unmount(p, 0)
		if errors.Is(err, unix.EBUSY) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if errors.Is(err, unix.EBUSY) {
			// Something still holds it. Detach it: the kernel frees it
			// once the last user lets go, and MountDisk waits for that
			// before it mounts the disk again.
			err = unix.Unmount(p, unix.MNT_DETACH)
		}
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmounting %s: %w", p, err)
		}
		if err != nil {
			return nil
		}
	}
	return nil
}

// waitDetached waits until no loop device is backed by img (the file of a
// sandbox's disk), for up to wait. A device stays attached while a
// filesystem on it lives, detached from its mount point or not (autoclear
// frees it with the filesystem).
func waitDetached(img *os.File, wait time.Duration) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(img.Fd()), &st); err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	deadline := time.Now().Add(wait)
	for {
		dev, attached := loopBacking(st.Dev, st.Ino)
		if !attached {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the sandbox's disk is still held by its previous filesystem (%s: a process on the host keeps a file of it open); try again once it has let go: %w", dev, errdefs.ErrUnavailable)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// loopBacking finds a loop device whose backing file is the inode ino on
// device dev.
func loopBacking(dev, ino uint64) (string, bool) {
	names, _ := filepath.Glob("/sys/block/loop*")
	for _, n := range names {
		path := "/dev/" + filepath.Base(n)
		f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		info, err := unix.IoctlLoopGetStatus64(int(f.Fd()))
		f.Close()
		if err == nil && info.Inode == ino && info.Device == dev {
			return path, true
		}
	}
	return "", false
}

// mounted reports whether p is a mount point. Everything this package
// mounts (a loop-mounted ext4, an overlay) has a device of its own, so
// comparing with the parent's device is enough.
func mounted(p string) bool {
	var st, parent unix.Stat_t
	if unix.Lstat(p, &st) != nil || unix.Lstat(filepath.Dir(p), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// Usage reports the bytes used and the size of a mounted disk.
func Usage(l Layout) (used, total uint64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(l.Disk(), &st); err != nil {
		return 0, 0, err
	}
	total = st.Blocks * uint64(st.Bsize)
	used = total - st.Bfree*uint64(st.Bsize)
	return used, total, nil
}

// DiskPool keeps a few formatted disk images of one size ready, so that
// mkfs (~20 ms) is off the create path. Take moves one into a sandbox's
// layout; a background refill replaces it. The pool's directory holds
// nothing else; its files are plain sparse images, safe to delete.
type DiskPool struct {
	dir  string
	size int64
	want int

	mu      sync.Mutex
	ready   []string
	filling bool
	seq     int
}

// NewDiskPool empties dir and starts filling it with want disks of size.
func NewDiskPool(dir string, size int64, want int) (*DiskPool, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &DiskPool{dir: dir, size: size, want: want}
	p.refill()
	return p, nil
}

// Take moves a ready disk of size bytes into l, reporting whether it had
// one. Without one, the caller makes the disk itself.
func (p *DiskPool) Take(l Layout, size int64) bool {
	if p == nil || size != p.size {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.refillLocked()
	for len(p.ready) > 0 {
		img := p.ready[len(p.ready)-1]
		p.ready = p.ready[:len(p.ready)-1]
		if err := os.Rename(img, l.DiskImage()); err == nil {
			return true
		}
		os.Remove(img)
	}
	return false
}

func (p *DiskPool) refill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refillLocked()
}

func (p *DiskPool) refillLocked() {
	if p.filling || len(p.ready) >= p.want {
		return
	}
	p.filling = true
	go func() {
		for {
			p.mu.Lock()
			if len(p.ready) >= p.want {
				p.filling = false
				p.mu.Unlock()
				return
			}
			p.seq++
			l := Layout{Dir: filepath.Join(p.dir, fmt.Sprintf("d%d", p.seq))}
			p.mu.Unlock()
			err := CreateDisk(context.Background(), l, p.size)
			p.mu.Lock()
			if err != nil {
				// Making disks fails here as it would on the create
				// path; leave it to that path to report.
				p.filling = false
				p.mu.Unlock()
				os.RemoveAll(l.Dir)
				return
			}
			img := filepath.Join(p.dir, fmt.Sprintf("ready%d.img", p.seq))
			if os.Rename(l.DiskImage(), img) == nil {
				p.ready = append(p.ready, img)
			}
			os.RemoveAll(l.Dir)
			p.mu.Unlock()
		}
	}()
}
