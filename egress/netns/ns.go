package netns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// nsfsMagic is the statfs f_type of a namespace file (NSFS_MAGIC).
const nsfsMagic = 0x6e736673

// inNS runs f on an OS thread that has joined the network namespace ns,
// then puts the thread back. A thread that cannot go back is not
// returned to the Go scheduler (the goroutine keeps it locked and exits,
// which ends the thread), so no other goroutine runs in the wrong
// namespace.
func inNS(ns *os.File, f func() error) error {
	return onThread(func() error {
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("joining network namespace %s: %w", ns.Name(), err)
		}
		return f()
	})
}

// onThread runs f on a locked thread that may leave the service's network
// namespace (f calls setns or unshare), and restores it afterwards.
func onThread(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer self.Close()
		ferr := f()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			// Stay locked: the thread ends with this goroutine.
			errc <- errors.Join(ferr, fmt.Errorf("returning to the service's network namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// newNS makes a network namespace, runs setup inside it, and keeps it
// alive by bind-mounting it on path (a new file). On failure nothing is
// left at path.
func newNS(path string, setup func() error) (err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return err
	}
	f.Close()
	defer func() {
		if err != nil {
			removeNS(path)
		}
	}()
	return onThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare a network namespace: %w", err)
		}
		if err := unix.Mount("/proc/thread-self/ns/net", path, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mounting the new network namespace on %s: %w", path, err)
		}
		return setup()
	})
}

// openNS opens the namespace bind-mounted at path; ok is false when path
// is there but no namespace is mounted on it (after a reboot).
func openNS(path string) (f *os.File, ok bool, err error) {
	f, err = os.Open(path)
	if err != nil {
		return nil, false, err
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, false, err
	}
	if st.Type != nsfsMagic {
		f.Close()
		return nil, false, nil
	}
	return f, true, nil
}

// removeNS unmounts the namespace at path and removes the file. The
// namespace itself ends when nothing else (a sandbox's process, an open
// fd) holds it.
func removeNS(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmounting network namespace %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// sysctls writes net sysctls (paths under /proc/sys/net) in the calling
// thread's network namespace: /proc/sys/net is resolved per thread.
func sysctls(kv map[string]string) error {
	for k, v := range kv {
		p := filepath.Join("/proc/sys/net", k)
		if err := os.WriteFile(p, []byte(v), 0); err != nil {
			return fmt.Errorf("sysctl net/%s=%s: %w", k, v, err)
		}
	}
	return nil
}

// noIPv6 turns IPv6 off in a namespace: on the devices there now and on
// every device that comes later.
var noIPv6 = map[string]string{
	"ipv6/conf/all/disable_ipv6":     "1",
	"ipv6/conf/default/disable_ipv6": "1",
}
