package oci

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/rootfs"
)

// IDRange is a contiguous range of host user and group ids that a
// sandbox's ids 0..Size-1 map to.
type IDRange struct {
	HostID uint32
	Size   uint32
}

// SandboxIDs is the range every runc sandbox's root and other users map
// to on the host: 65536 ids from 0x70000000 (1879048192).
//
// Why there: it is above the ranges that /etc/subuid hands out (100000
// and up, in 65536 steps, for rootless containers of host users) and
// systemd-nspawn's container range (524288-1879048191), and below
// 2^31, where signed-id bugs live, and systemd's "foreign" range
// (2147352576-2147418111). No host user or other container runtime
// should own files or processes in it, so sandbox root can reach on the
// host only what is world-accessible.
//
// Every sandbox gets the same range for now: one sandbox's root can then
// signal or ptrace another's processes only if it can name them, which
// separate pid namespaces prevent. Ranges per sandbox would be
// SandboxIDs.HostID + n*65536 for a slot n recorded with the sandbox; the
// disk needs no change for that, because of the idmapped mounts below.
var SandboxIDs = IDRange{HostID: 0x70000000, Size: 65536}

// UserNS runs sandboxes in a user namespace: sandbox root is an
// unprivileged host uid. The rootfs and the writable bind mounts are
// presented through idmapped mounts (mount_setattr(MOUNT_ATTR_IDMAP)),
// so what the sandbox sees as uid 0 is uid 0 on the disk: the ownership
// the image has, the same as under gvisor, and a disk moves between
// backends unchanged.
//
// runc 1.1 neither makes idmapped mounts nor opens mount sources before
// it enters the user namespace, so Stage makes them, attached under Dir,
// before the runtime runs:
//
//	Dir/<id>/rootfs   the sandbox's root
//	Dir/<id>/m<N>     the source of the spec's N-th mount, if a bind
//
// Dir and its parent are 0711 and Dir/<id> is 0710, group the sandbox's
// gid, because runc sets the mounts up as sandbox root, which must be
// able to walk there; other host users cannot.
//
// An overlay cannot itself be idmapped (overlayfs does not allow it), but
// its layers can: when Bundle.Rootfs is an overlay, Stage replaces it with
// an overlay of the same layers, each an idmapped mount given to the
// kernel by file descriptor. Its options then read "lowerdir+=/",
// "upperdir=/upper": the host paths of the layers are not in the
// sandbox's /proc/mounts. The Bundle.Rootfs mount point is left empty
// while the sandbox runs (two overlays on one upper layer are undefined
// behaviour); its owner may mount it again after Delete.
type UserNS struct {
	IDs IDRange
	Dir string

	mu sync.Mutex
	ns int // an fd of a user namespace with IDs' mapping, once made; 0 until then
}

// NewUserNS returns a UserNS with ids whose mounts live under a directory
// of /run named after stateDir, so that backends on different state dirs
// do not meet.
func NewUserNS(stateDir string, ids IDRange) *UserNS {
	sum := sha256.Sum256([]byte(stateDir))
	return &UserNS{IDs: ids, Dir: filepath.Join("/run/reins-runc", hex.EncodeToString(sum[:6]))}
}

// makeDir makes u.Dir and its parent, walkable by anyone (0711); Unstage
// removes u.Dir when it empties, Stage makes it again.
func (u *UserNS) makeDir() error {
	for _, d := range []string{filepath.Dir(u.Dir), u.Dir} {
		if err := os.Mkdir(d, 0o711); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return err
		}
	}
	return nil
}

// Adjust puts the spec's processes in a new user namespace with u's ids.
func (u *UserNS) Adjust(s *specs.Spec) {
	m := []specs.LinuxIDMapping{{ContainerID: 0, HostID: u.IDs.HostID, Size: u.IDs.Size}}
	s.Linux.UIDMappings, s.Linux.GIDMappings = m, m
	s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
}

// Stage makes the idmapped mounts of a sandbox and points the spec at
// them. What it leaves on failure, Unstage removes.
func (u *UserNS) Stage(s *specs.Spec, b sandbox.Bundle) error {
	dir := filepath.Join(u.Dir, b.ID)
	err := os.Mkdir(dir, 0o710)
	if errors.Is(err, os.ErrNotExist) { // the first sandbox, or an Unstage removed u.Dir
		if err = u.makeDir(); err == nil {
			err = os.Mkdir(dir, 0o710)
		}
	}
	if err != nil {
		return fmt.Errorf("sandbox %s: %w", b.ID, err)
	}
	if err := os.Chown(dir, 0, int(u.IDs.HostID)); err != nil {
		return fmt.Errorf("sandbox %s: %w", b.ID, err)
	}
	ns, err := u.userns()
	if err != nil {
		return fmt.Errorf("sandbox %s: user namespace for idmapped mounts: %w", b.ID, err)
	}
	root := filepath.Join(dir, "rootfs")
	if err := u.stageRoot(b.Rootfs, root, ns); err != nil {
		return fmt.Errorf("sandbox %s: root filesystem: %w", b.ID, err)
	}
	s.Root.Path = root
	for i := range s.Mounts {
		m := &s.Mounts[i]
		if m.Type != "bind" {
			continue
		}
		target := filepath.Join(dir, "m"+strconv.Itoa(i))
		ro := slices.Contains(m.Options, "ro")
		if err := stageBind(m.Source, target, ns, ro); err != nil {
			return fmt.Errorf("sandbox %s: mount %s: %w", b.ID, m.Destination, err)
		}
		m.Source = target
	}
	if b.NetNS != "" {
		if err := stageSysfs(s, b.NetNS, filepath.Join(dir, "sys")); err != nil {
			return fmt.Errorf("sandbox %s: /sys: %w", b.ID, err)
		}
	}
	return nil
}

// stageSysfs mounts, for a sandbox joining the network namespace netns,
// the sysfs it would have mounted itself, and points the spec's /sys at
// it. The sandbox cannot mount it: sysfs takes the mounter's network
// namespace, and mounting one needs CAP_SYS_ADMIN in the user namespace
// that owns it, the host's (egress/netns makes the namespace there so
// that the sandbox has no CAP_NET_ADMIN over it). The service mounts it
// from a thread inside netns, read-only as the spec's; /sys/class/net then
// lists the sandbox's own interfaces, as in a namespace of its own.
func stageSysfs(s *specs.Spec, netns, target string) error {
	i := slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return m.Type == "sysfs" })
	if i < 0 {
		return nil
	}
	if err := os.Mkdir(target, 0o755); err != nil {
		return err
	}
	ns, err := os.Open(netns)
	if err != nil {
		return err
	}
	defer ns.Close()
	errc := make(chan error, 1)
	go func() {
		// The thread never goes back to the scheduler: it ends with this
		// goroutine, in the sandbox's network namespace.
		runtime.LockOSThread()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("joining network namespace: %w", err)
			return
		}
		errc <- unix.Mount("sysfs", target, "sysfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	}()
	if err := <-errc; err != nil {
		return err
	}
	s.Mounts[i] = specs.Mount{Destination: "/sys", Type: "bind", Source: target,
		Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}}
	return nil
}

// Unstage detaches a sandbox's idmapped mounts and removes their mount
// points. It never removes anything that is still a mount.
func (u *UserNS) Unstage(id string) error {
	dir := filepath.Join(u.Dir, id)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sandbox %s: %w", id, err)
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		for range 16 { // stacked mounts, should someone have added one
			if unix.Unmount(p, unix.MNT_DETACH) != nil {
				break
			}
		}
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("sandbox %s: %w", id, err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sandbox %s: %w", id, err)
	}
	_ = os.Remove(u.Dir) // only if no other sandbox has mounts there
	return nil
}

// stageRoot attaches at target an idmapped view of rootfs: a new overlay
// of idmapped layers if rootfs is an overlay, else an idmapped bind.
func (u *UserNS) stageRoot(rootfs, target string, ns int) error {
	if err := os.Mkdir(target, 0o755); err != nil {
		return err
	}
	layers, isOverlay, err := overlayAt(rootfs)
	if err != nil {
		return err
	}
	if !isOverlay {
		fd, err := idmapped(rootfs, ns)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return attach(fd, target)
	}
	fd, held, err := u.overlay(layers, ns)
	defer closeAll(held)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	// The owner's overlay goes first: the kernel does not support two
	// overlays on one upper layer at a time.
	if err := unix.Unmount(rootfs, 0); err != nil {
		if err := unix.Unmount(rootfs, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount the overlay at %s: %w", rootfs, err)
		}
	}
	return u.mountOverlay(fd, target)
}

// overlayLayers are an overlay's directories, top-most lower layer first.
type overlayLayers struct {
	lower        []string
	upper, work  string
	hasDataLayer bool
}

// overlay opens the layers idmapped and configures (but does not yet
// create) an overlay of them; it returns the fsopen fd and the layers'
// fds, which must stay open until the overlay is created: a detached
// mount dissolves when its last fd is closed.
func (u *UserNS) overlay(l overlayLayers, ns int) (fd int, held []int, err error) {
	if l.hasDataLayer || l.upper == "" || l.work == "" || len(l.lower) == 0 {
		return -1, held, fmt.Errorf("an overlay with data layers or without an upper layer is not supported: %w", errdefs.ErrFailedPrecondition)
	}
	// upperdir and workdir must be on one mount: an idmapped clone of
	// their common parent.
	parent := filepath.Dir(l.upper)
	if filepath.Dir(l.work) != parent {
		return -1, held, fmt.Errorf("overlay upper %s and work %s are not in one directory: %w", l.upper, l.work, errdefs.ErrFailedPrecondition)
	}
	fd, err = unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, held, fmt.Errorf("overlayfs: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			unix.Close(fd)
		}
	}()
	fail := func(what string, err error) (int, []int, error) {
		return -1, held, fmt.Errorf("overlay (%s): %w%s", what, err, rootfs.FsLog(fd))
	}
	if err := unix.FsconfigSetString(fd, "source", "overlay"); err != nil {
		return fail("source", err)
	}
	for _, p := range l.lower {
		lfd, err := idmapped(p, ns)
		if err != nil {
			return -1, held, err
		}
		held = append(held, lfd)
		if err := unix.FsconfigSetFd(fd, "lowerdir+", lfd); err != nil {
			return fail("a layer", err)
		}
	}
	pfd, err := idmapped(parent, ns)
	if err != nil {
		return -1, held, err
	}
	held = append(held, pfd)
	for _, kv := range [][2]string{{"upperdir", l.upper}, {"workdir", l.work}} { // in this order
		key, p := kv[0], kv[1]
		dfd, err := unix.Openat(pfd, filepath.Base(p), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(key, err)
		}
		held = append(held, dfd)
		if err := unix.FsconfigSetFd(fd, key, dfd); err != nil {
			return fail(key, err)
		}
	}
	ok = true
	return fd, held, nil
}

// mountOverlay creates the configured overlay and attaches it at target.
// The overlay does its own work on the upper layer (its work directory,
// copy-ups, whiteouts) with the credentials of whoever creates it; through
// the idmapped upper layer only ids in u's range can write, so it is
// created as sandbox root (with our capabilities), which lands as 0 on
// the disk.
func (u *UserNS) mountOverlay(fd int, target string) error {
	err := asID(u.IDs.HostID, func() error { return unix.FsconfigCreate(fd) })
	if err != nil {
		return fmt.Errorf("overlay (create): %w%s", err, rootfs.FsLog(fd))
	}
	mfd, err := unix.Fsmount(fd, unix.FSMOUNT_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("overlay (fsmount): %w%s", err, rootfs.FsLog(fd))
	}
	defer unix.Close(mfd)
	return attach(mfd, target)
}

// asID runs f on a thread of its own whose filesystem ids are id, with
// the effective capabilities it had. The thread is never given back to
// the Go scheduler: it ends with its goroutine, odd credentials and all.
func asID(id uint32, f func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		ch <- func() error {
			hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
			var caps [2]unix.CapUserData
			if err := unix.Capget(&hdr, &caps[0]); err != nil {
				return err
			}
			unix.Setfsgid(int(id))
			unix.Setfsuid(int(id))
			// Changing the fsuid from 0 drops the file capabilities
			// from the effective set; take them back.
			if err := unix.Capset(&hdr, &caps[0]); err != nil {
				return err
			}
			return f()
		}()
	}()
	return <-ch
}

// stageBind attaches at target an idmapped clone of src. A read-only bind
// whose filesystem cannot be idmapped is cloned as it is: its files are
// then owned by nobody inside, which reading and running them allow.
func stageBind(src, target string, ns int, readOnly bool) error {
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	if st.IsDir() {
		err = os.Mkdir(target, 0o755)
	} else {
		err = os.WriteFile(target, nil, 0o644)
	}
	if err != nil {
		return err
	}
	fd, err := idmapped(src, ns)
	if err != nil && readOnly && errors.Is(err, errdefs.ErrFailedPrecondition) {
		fd, err = unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return attach(fd, target)
}

// idmapped returns a detached clone of the mount at path (from path down),
// idmapped with the user namespace ns.
func idmapped(path string, ns int) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("clone the mount of %s: %w", path, err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(ns)}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPERM) {
			return -1, fmt.Errorf("%s is on a filesystem that cannot be idmapped (the runc backend needs ext4, xfs, btrfs or tmpfs there): %v: %w", path, err, errdefs.ErrFailedPrecondition)
		}
		return -1, fmt.Errorf("idmap %s: %w", path, err)
	}
	return fd, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

func attach(fd int, target string) error {
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach at %s: %w", target, err)
	}
	return nil
}

// userns returns the fd of a user namespace with u's mapping, made on
// first use and kept (making one costs about 2 ms, a third of Stage).
func (u *UserNS) userns() (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.ns > 0 {
		return u.ns, nil
	}
	fd, err := u.nsFD()
	if err != nil {
		return -1, err
	}
	u.ns = fd
	return fd, nil
}

// nsFD returns an fd of a user namespace with u's mapping. Only a process
// can make one: a child of ours is created in it, stopped by ptrace before
// it runs a single instruction of its program, and killed once its
// namespace is open.
func (u *UserNS) nsFD() (int, error) {
	runtime.LockOSThread() // the tracer of the child is this thread
	defer runtime.UnlockOSThread()
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(u.IDs.HostID), Size: int(u.IDs.Size)}}
	cmd := &exec.Cmd{
		Path: "/proc/self/exe",
		Args: []string{"reins-userns"},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: unix.CLONE_NEWUSER, UidMappings: m, GidMappings: m,
			Ptrace: true, Pdeathsig: syscall.SIGKILL,
		},
	}
	if err := cmd.Start(); err != nil {
		return -1, err
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	return unix.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
}

// overlayAt reports whether the top mount at p is an overlay, and if so
// its layers, from /proc/self/mountinfo.
func overlayAt(p string) (overlayLayers, bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return overlayLayers{}, false, err
	}
	defer f.Close()
	var fstype, opts string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(tail) < 3 || unescape(fields[4]) != p {
			continue
		}
		fstype, opts = tail[0], tail[2] // the last one listed is on top
	}
	if err := sc.Err(); err != nil {
		return overlayLayers{}, false, err
	}
	if fstype != "overlay" {
		return overlayLayers{}, false, nil
	}
	l, err := parseOverlayOptions(opts)
	return l, true, err
}

// parseOverlayOptions reads an overlay's super options as mountinfo shows
// them: "lowerdir+=A,lowerdir+=B" (or "lowerdir=A:B"), "upperdir=",
// "workdir=", paths octal-escaped.
func parseOverlayOptions(opts string) (overlayLayers, error) {
	var l overlayLayers
	for _, o := range strings.Split(opts, ",") {
		k, v, _ := strings.Cut(o, "=")
		switch k {
		case "lowerdir+":
			l.lower = append(l.lower, unescape(v))
		case "lowerdir":
			for _, d := range strings.Split(v, ":") {
				if d != "" { // "::" separates data layers; not used
					l.lower = append(l.lower, unescape(d))
				}
			}
			l.hasDataLayer = strings.Contains(v, "::")
		case "datadir+":
			l.hasDataLayer = true
		case "upperdir":
			l.upper = unescape(v)
		case "workdir":
			l.work = unescape(v)
		}
	}
	for _, d := range append([]string{l.upper, l.work}, l.lower...) {
		if d != "" && !filepath.IsAbs(d) {
			return l, fmt.Errorf("overlay layer %q is not an absolute path: %w", d, errdefs.ErrFailedPrecondition)
		}
	}
	return l, nil
}

// unescape undoes the kernel's \ooo escapes in mountinfo.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
