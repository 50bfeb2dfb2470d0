package process

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// reaper collects the exit statuses of children. There is one per process:
// a child's status can be collected once, by one waiter.
//
// When the executor is the sandbox's init (PID 1), or a child subreaper,
// orphaned grandchildren are reparented to it and must be reaped too, or they
// stay zombies. It then waits on any child (wait4(-1)) and hands each status
// to the owner that registered the pid, dropping the orphans'. Nothing else
// in the process may wait for children in that mode (no os/exec): it would
// race for the same statuses. Otherwise it waits only for the pids it owns.
//
// A child is forked and registered under the reaper's lock, so its status can
// never be collected before its owner is known.
type reaper struct {
	mu     sync.Mutex
	refs   int
	all    bool
	owners map[int]func(syscall.WaitStatus)
	sig    chan os.Signal
	stop   chan struct{}
	done   chan struct{}
}

var theReaper reaper

// acquire starts the reaper for one more user.
func (r *reaper) acquire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refs++
	if r.refs > 1 {
		return
	}
	r.all = os.Getpid() == 1 || isSubreaper()
	if r.owners == nil {
		r.owners = make(map[int]func(syscall.WaitStatus))
	}
	r.sig = make(chan os.Signal, 1)
	r.stop = make(chan struct{})
	r.done = make(chan struct{})
	signal.Notify(r.sig, syscall.SIGCHLD)
	go r.loop(r.sig, r.stop, r.done)
}

// release stops the reaper when its last user is gone.
func (r *reaper) release() {
	r.mu.Lock()
	r.refs--
	if r.refs > 0 {
		r.mu.Unlock()
		return
	}
	signal.Stop(r.sig)
	close(r.stop)
	done := r.done
	r.mu.Unlock()
	<-done
}

// isSubreaper reports whether orphans of this process's descendants are
// reparented to it (PR_SET_CHILD_SUBREAPER).
func isSubreaper() bool {
	var flag int32
	err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&flag)), 0, 0, 0)
	return err == nil && flag != 0
}

func (r *reaper) loop(sig <-chan os.Signal, stop, done chan struct{}) {
	defer close(done)
	for {
		select {
		case <-sig:
			r.reap()
		case <-stop:
			return
		}
	}
}

// spawn runs fork under the lock and registers the pid it returns, with
// onExit to be called (from the reaper's goroutine) with its status.
func (r *reaper) spawn(fork func() (int, error), onExit func(syscall.WaitStatus)) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := fork()
	if err == nil {
		r.owners[pid] = onExit
	}
	return pid, err
}

type exit struct {
	fn func(syscall.WaitStatus)
	ws syscall.WaitStatus
}

func (r *reaper) reap() {
	var exits []exit
	r.mu.Lock()
	if r.all {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err == syscall.EINTR {
				continue
			}
			if err != nil || pid <= 0 {
				break
			}
			if fn, ok := r.owners[pid]; ok {
				delete(r.owners, pid)
				exits = append(exits, exit{fn, ws})
			} // else an orphan: reaped, nothing to report
		}
	} else {
		for pid, fn := range r.owners {
			var ws syscall.WaitStatus
			got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
			for err == syscall.EINTR {
				got, err = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
			}
			if got == pid || err == syscall.ECHILD {
				if err == syscall.ECHILD {
					ws = 0xff00 // exit status 255: someone else collected it
				}
				delete(r.owners, pid)
				exits = append(exits, exit{fn, ws})
			}
		}
	}
	r.mu.Unlock()
	for _, e := range exits {
		e.fn(e.ws)
	}
}

// kill sends sig to the process group of pid if pid is still registered,
// that is not reaped yet: until then the pid (and so the group id) cannot
// have been reused by someone else.
func (r *reaper) kill(pid int, sig syscall.Signal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.owners[pid]; !ok {
		return nil
	}
	return syscall.Kill(-pid, sig)
}

// tryReap collects the status of pid if it is already a zombie, sparing the
// wait for SIGCHLD and its trip through the signal machinery. A process's
// output pipes usually reach EOF as it exits, a moment before its SIGCHLD
// arrives. It reports whether it collected the status (and called its
// owner).
func (r *reaper) tryReap(pid int) bool {
	r.mu.Lock()
	fn, ok := r.owners[pid]
	if !ok {
		r.mu.Unlock()
		return false
	}
	var ws syscall.WaitStatus
	got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	for err == syscall.EINTR {
		got, err = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	}
	if got != pid {
		r.mu.Unlock()
		return false
	}
	delete(r.owners, pid)
	r.mu.Unlock()
	fn(ws)
	return true
}
