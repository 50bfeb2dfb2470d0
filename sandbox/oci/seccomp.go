package oci

import (
	"runtime"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Seccomp is the system call filter of a runc sandbox: Docker's default
// profile for a container without CAP_SYS_ADMIN, made a little stricter.
//
// Anything not listed fails with EPERM. What that denies, as Docker does:
// namespaces (unshare and clone with namespace flags, setns), mounting
// (mount, umount2, pivot_root, the fsopen/open_tree family), keyrings
// (add_key, keyctl, request_key), bpf, perf_event_open, userfaultfd (it
// lets a process stretch a kernel race at will), kexec, modules,
// reboot, swap, quotas, the clock, acct, lookup_dcookie, fanotify_init,
// open_by_handle_at, process_madvise, kcmp. Stricter than Docker:
//   - io_uring_* are denied (Docker denies them since 25.0): io_uring is
//     a second system call interface with its own history of bugs, which
//     the filter cannot see into.
//   - socket(2) takes only AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK (Docker
//     denies only AF_VSOCK and AF_ALG).
//   - On x86 only 64-bit programs run: the filter has no x86 or x32 part,
//     so a 32-bit process dies of SIGSYS at its first system call. Docker
//     allows both, and 32-bit x86 makes sockets through socketcall(2),
//     whose arguments a filter cannot read: libseccomp turns every socket
//     rule into an unconditional socketcall(SYS_SOCKET) rule there, so
//     AF_VSOCK stays open to 32-bit programs under Docker's profile
//     (measured with runc 1.1.5 and libseccomp 2.5.4). The compat system
//     call table is also a surface of its own; x32 is off in most kernels.
//   - personality(2) takes only the values Docker allows (no
//     ADDR_NO_RANDOMIZE, no READ_IMPLIES_EXEC).
//
// clone3 fails with ENOSYS, not EPERM: its flags live in memory the filter
// cannot read, and ENOSYS makes libc fall back to clone, whose flags it can.
// runc adds its own ENOSYS answer for system calls newer than any it knows,
// so libc's fallbacks for those work too.
//
// The architectures are the host's native one (and, on arm64, 32-bit arm,
// which has no socketcall); a process of any other architecture is killed
// by the filter.
func Seccomp() *specs.LinuxSeccomp {
	eperm, enosys := uint(unix.EPERM), uint(unix.ENOSYS)
	allow := slices.Concat(sysFiles, sysMemory, sysProcesses, sysSignals, sysTime,
		sysIPC, sysNetwork, sysIDs, sysMisc, archAllowed())
	rules := []specs.LinuxSyscall{{Names: allow, Action: specs.ActAllow}}
	rules = append(rules, masked("clone", cloneNSFlags)...)
	rules = append(rules, masked("unshare", cloneNSFlags|unix.CLONE_NEWTIME)...)
	rules = append(rules, specs.LinuxSyscall{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys})
	for _, v := range personalities {
		rules = append(rules, argIs("personality", 0, v))
	}
	for _, af := range socketFamilies {
		rules = append(rules, argIs("socket", 0, af))
	}
	return &specs.LinuxSeccomp{
		DefaultAction:   specs.ActErrno,
		DefaultErrnoRet: &eperm,
		Architectures:   seccompArches(),
		Syscalls:        rules,
	}
}

// cloneNSFlags are the clone flags that make namespaces. CLONE_NEWTIME is
// not among them for clone(2), where 0x80 is part of the exit signal.
const cloneNSFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP

// socketFamilies are the address families socket(2) may create: local and
// IP sockets, and netlink (ip, getifaddrs). Not AF_PACKET (no CAP_NET_RAW
// anyway), AF_VSOCK (the host's hypervisor), AF_ALG (kernel crypto), nor
// the dozens of rarely used families with their own drivers.
var socketFamilies = []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

// personalities are the personality(2) arguments allowed: the default
// (PER_LINUX), PER_LINUX32, UNAME26, both, and the query 0xffffffff.
var personalities = []uint64{0x0, perLinux32, uname26, perLinux32 | uname26, 0xffffffff}

// From <linux/personality.h>.
const (
	perLinux32 = 0x0008
	uname26    = 0x0020000
)

// masked allows name when its first argument has none of flags set.
func masked(name string, flags uint64) []specs.LinuxSyscall {
	return []specs.LinuxSyscall{{
		Names: []string{name}, Action: specs.ActAllow,
		Args: []specs.LinuxSeccompArg{{Index: 0, Value: flags, ValueTwo: 0, Op: specs.OpMaskedEqual}},
	}}
}

// argIs allows name when argument index equals v.
func argIs(name string, index uint, v uint64) specs.LinuxSyscall {
	return specs.LinuxSyscall{
		Names: []string{name}, Action: specs.ActAllow,
		Args: []specs.LinuxSeccompArg{{Index: index, Value: v, Op: specs.OpEqualTo}},
	}
}

func seccompArches() []specs.Arch {
	switch runtime.GOARCH {
	case "arm64":
		return []specs.Arch{specs.ArchAARCH64, specs.ArchARM}
	default:
		return []specs.Arch{specs.ArchX86_64}
	}
}

func archAllowed() []string {
	switch runtime.GOARCH {
	case "arm64":
		return []string{"arm_fadvise64_64", "arm_sync_file_range", "sync_file_range2", "breakpoint", "cacheflush", "set_tls"}
	default:
		return []string{"arch_prctl", "modify_ldt", "uretprobe"}
	}
}

// The allowlist, by topic. Names a kernel or libseccomp does not know
// (the 32-bit variants on a 64-bit table, the newest calls) are skipped by
// runc.
var (
	sysFiles = []string{
		"access", "faccessat", "faccessat2", "chdir", "fchdir", "getcwd",
		"chmod", "fchmod", "fchmodat", "fchmodat2",
		"chown", "chown32", "fchown", "fchown32", "fchownat", "lchown", "lchown32",
		"open", "openat", "openat2", "creat", "close", "close_range",
		"read", "readv", "pread64", "preadv", "preadv2",
		"write", "writev", "pwrite64", "pwritev", "pwritev2",
		"lseek", "_llseek", "sendfile", "sendfile64", "copy_file_range",
		"splice", "tee", "vmsplice", "readahead", "fadvise64", "fadvise64_64",
		"fallocate", "truncate", "truncate64", "ftruncate", "ftruncate64",
		"fsync", "fdatasync", "sync", "syncfs", "sync_file_range",
		"stat", "stat64", "lstat", "lstat64", "fstat", "fstat64", "fstatat64", "newfstatat", "statx",
		"statfs", "statfs64", "fstatfs", "fstatfs64",
		"getdents", "getdents64", "mkdir", "mkdirat", "rmdir", "mknod", "mknodat",
		"link", "linkat", "unlink", "unlinkat", "symlink", "symlinkat",
		"readlink", "readlinkat", "rename", "renameat", "renameat2",
		"utime", "utimes", "utimensat", "utimensat_time64", "futimesat", "umask",
		"getxattr", "lgetxattr", "fgetxattr", "getxattrat",
		"setxattr", "lsetxattr", "fsetxattr", "setxattrat",
		"listxattr", "llistxattr", "flistxattr", "listxattrat",
		"removexattr", "lremovexattr", "fremovexattr", "removexattrat",
		"dup", "dup2", "dup3", "fcntl", "fcntl64", "flock", "ioctl", "name_to_handle_at",
		"inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch", "fanotify_mark",
		"poll", "ppoll", "ppoll_time64", "select", "_newselect", "pselect6", "pselect6_time64",
		"epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old",
		"epoll_wait", "epoll_wait_old", "epoll_pwait", "epoll_pwait2",
		"eventfd", "eventfd2", "pipe", "pipe2", "memfd_create",
		// Linux AIO (not io_uring).
		"io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents", "io_pgetevents_time64",
		"chroot", "statmount", "listmount",
	}
	sysMemory = []string{
		"brk", "mmap", "mmap2", "munmap", "mremap", "mprotect", "madvise", "mincore", "msync",
		"mlock", "mlock2", "mlockall", "munlock", "munlockall", "remap_file_pages", "membarrier",
		"memfd_secret", "pkey_alloc", "pkey_free", "pkey_mprotect", "map_shadow_stack", "mseal", "cachestat",
	}
	sysProcesses = []string{
		"execve", "execveat", "exit", "exit_group", "fork", "vfork",
		"wait4", "waitid", "waitpid", "getpid", "getppid", "gettid", "set_tid_address",
		"getpgid", "setpgid", "getpgrp", "getsid", "setsid", "getpriority", "setpriority",
		"getrlimit", "setrlimit", "ugetrlimit", "prlimit64", "getrusage", "times",
		"sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getattr", "sched_setattr",
		"sched_getparam", "sched_setparam", "sched_getscheduler", "sched_setscheduler",
		"sched_get_priority_max", "sched_get_priority_min", "sched_rr_get_interval", "sched_rr_get_interval_time64",
		"ioprio_get", "ioprio_set", "getcpu", "prctl", "seccomp", "capget", "capset",
		"futex", "futex_time64", "futex_waitv", "futex_wake", "futex_wait", "futex_requeue",
		"set_robust_list", "get_robust_list", "rseq", "restart_syscall",
		"get_thread_area", "set_thread_area",
		"landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
		// Tracing one's own children (strace, gdb), as Docker allows on
		// kernels since 4.8, where ptrace no longer bypasses seccomp.
		"ptrace", "process_vm_readv", "process_vm_writev",
		"pidfd_open", "pidfd_send_signal", "process_mrelease",
	}
	sysSignals = []string{
		"kill", "tkill", "tgkill", "pause", "sigaltstack", "signalfd", "signalfd4",
		"rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn",
		"rt_sigsuspend", "rt_sigtimedwait", "rt_sigtimedwait_time64", "rt_tgsigqueueinfo",
		"sigprocmask", "sigreturn",
	}
	sysTime = []string{
		"time", "gettimeofday", "clock_gettime", "clock_gettime64", "clock_getres", "clock_getres_time64",
		"clock_nanosleep", "clock_nanosleep_time64", "nanosleep", "alarm",
		"getitimer", "setitimer", "timer_create", "timer_delete", "timer_getoverrun",
		"timer_gettime", "timer_gettime64", "timer_settime", "timer_settime64",
		"timerfd_create", "timerfd_gettime", "timerfd_gettime64", "timerfd_settime", "timerfd_settime64",
		// Reading the clock's adjustment; setting it needs CAP_SYS_TIME.
		"adjtimex", "clock_adjtime", "clock_adjtime64",
	}
	sysIPC = []string{
		"ipc", "msgget", "msgctl", "msgsnd", "msgrcv", "semget", "semctl", "semop", "semtimedop", "semtimedop_time64",
		"shmget", "shmctl", "shmat", "shmdt",
		"mq_open", "mq_unlink", "mq_getsetattr", "mq_notify", "mq_timedreceive", "mq_timedreceive_time64",
		"mq_timedsend", "mq_timedsend_time64",
	}
	sysNetwork = []string{
		"socketpair", "bind", "listen", "accept", "accept4", "connect", "shutdown",
		"getsockname", "getpeername", "getsockopt", "setsockopt",
		"send", "sendto", "sendmsg", "sendmmsg", "recv", "recvfrom", "recvmsg", "recvmmsg", "recvmmsg_time64",
	}
	sysIDs = []string{
		"getuid", "getuid32", "geteuid", "geteuid32", "getgid", "getgid32", "getegid", "getegid32",
		"getresuid", "getresuid32", "getresgid", "getresgid32", "getgroups", "getgroups32",
		"setuid", "setuid32", "setgid", "setgid32", "setreuid", "setreuid32", "setregid", "setregid32",
		"setresuid", "setresuid32", "setresgid", "setresgid32", "setgroups", "setgroups32",
		"setfsuid", "setfsuid32", "setfsgid", "setfsgid32",
	}
	sysMisc = []string{"uname", "sysinfo", "getrandom"}
)
