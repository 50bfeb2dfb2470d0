// Command probe tries, from inside a sandbox, what a hostile program would
// try against the host kernel, and prints one JSON object: check → outcome
// ("ok", an errno name such as "EPERM", or what it read). The tests of the
// runc backend and test/e2e build it statically (CGO_ENABLED=0) and judge
// the outcomes; it judges nothing itself.
package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "noop" {
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "in-new-userns" {
		// Root of a user namespace of our own: try to mount.
		os.Exit(boolExit(unix.Mount("tmpfs", "/tmp", "tmpfs", 0, "") == nil))
	}
	out := map[string]string{}
	out["clone_newuser_mount"] = cloneNewUser()
	out["unshare_newns"] = errName(unix.Unshare(unix.CLONE_NEWNS))
	out["clone3"] = errName(rawErr(unix.SYS_CLONE3, 0, 0, 0))
	out["setns"] = errName(unix.Setns(-1, 0))
	out["mount_tmpfs"] = errName(unix.Mount("tmpfs", "/mnt", "tmpfs", 0, ""))
	var params [120]byte
	out["io_uring_setup"] = fdResult(unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0))
	out["userfaultfd"] = fdResult(unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|1 /* UFFD_USER_MODE_ONLY */, 0, 0))
	_, err := unix.AddKey("user", "reins-probe", []byte("x"), unix.KEY_SPEC_USER_KEYRING)
	out["add_key"] = errName(err)
	_, err = unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_USER_KEYRING, 0, 0, 0)
	out["keyctl"] = errName(err)
	_, err = unix.RequestKey("user", "reins-probe", "", unix.KEY_SPEC_USER_KEYRING)
	out["request_key"] = errName(err)
	out["socket_vsock"] = socket(unix.AF_VSOCK)
	out["socket_alg"] = socket(unix.AF_ALG)
	out["socket_inet"] = socket(unix.AF_INET)
	out["socket_unix"] = socket(unix.AF_UNIX)
	// An unknown command: a kernel that is reached answers EINVAL.
	out["bpf"] = errName(rawErr(unix.SYS_BPF, 9999, 0, 0))
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{})), Bits: unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv}
	fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	out["perf_event_open"] = closeResult(fd, err)
	out["kexec_load"] = errName(rawErr(unix.SYS_KEXEC_LOAD, 0, 0, 0))
	out["init_module"] = errName(rawErr(unix.SYS_INIT_MODULE, 0, 0, 0))
	out["personality_no_aslr"] = errName(rawErr(unix.SYS_PERSONALITY, 0x0040000, 0, 0)) // ADDR_NO_RANDOMIZE
	rawErr(unix.SYS_PERSONALITY, 0, 0, 0)
	out["fork_plain"] = errName(exec.Command("/proc/self/exe", "noop").Run())
	out["proc_mounts"] = readFile("/proc/mounts")
	out["mountinfo"] = readFile("/proc/self/mountinfo")
	out["uid_map"] = strings.Join(strings.Fields(readFile("/proc/self/uid_map")), " ")
	out["powercap"] = listDir("/sys/devices/virtual/powercap")
	out["firmware"] = listDir("/sys/firmware")
	kcore, _ := os.ReadFile("/proc/kcore")
	out["kcore_bytes"] = itoa(len(kcore))
	json.NewEncoder(os.Stdout).Encode(out)
}

// cloneNewUser starts a child in new user, mount and network namespaces
// (clone(2) with those flags) that tries to mount a tmpfs there.
func cloneNewUser() string {
	cmd := exec.Command("/proc/self/exe", "in-new-userns")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &ee):
		return "mount failed"
	}
	return errName(err)
}

func boolExit(ok bool) int {
	if ok {
		return 0
	}
	return 1
}

func rawErr(trap, a1, a2, a3 uintptr) error {
	_, _, e := unix.Syscall(trap, a1, a2, a3)
	if e != 0 {
		return e
	}
	return nil
}

func fdResult(r, _ uintptr, e syscall.Errno) string {
	if e != 0 {
		return errName(e)
	}
	unix.Close(int(r))
	return "ok"
}

func closeResult(fd int, err error) string {
	if err == nil {
		unix.Close(fd)
	}
	return errName(err)
}

func socket(family int) string {
	fd, err := unix.Socket(family, unix.SOCK_STREAM, 0)
	if family == unix.AF_ALG {
		fd, err = unix.Socket(family, unix.SOCK_SEQPACKET, 0)
	}
	return closeResult(fd, err)
}

func errName(err error) string {
	if err == nil {
		return "ok"
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		if n := unix.ErrnoName(e); n != "" {
			return n
		}
	}
	return err.Error()
}

func readFile(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return errName(err)
	}
	return string(b)
}

func listDir(p string) string {
	ents, err := os.ReadDir(p)
	if err != nil {
		return errName(err)
	}
	return itoa(len(ents)) + " entries"
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
