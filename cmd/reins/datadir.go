package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockName is the file in the data dir that the serving process holds an
// exclusive flock on, and whose content is its pid.
const lockName = "serve.lock"

// openDataDir makes the data dir private (0700: it holds every tenant's
// event log, secrets and sandboxes) and takes an exclusive lock on it, so
// that a second `reins serve` on the same dir refuses before it recovers
// anything rather than drive the same sandboxes and database. The lock
// lasts as long as the returned file stays open (the process's life).
func openDataDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("making the data dir %s private: %w", dir, err)
	}
	p := filepath.Join(dir, lockName)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the data dir's lock %s: %w", p, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			who := "another process"
			if b, rerr := os.ReadFile(p); rerr == nil {
				if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
					who = fmt.Sprintf("another reins serve (pid %d)", pid)
				}
			}
			return nil, fmt.Errorf("the data dir %s is in use by %s: stop it first, or give this one another --data-dir", dir, who)
		}
		return nil, fmt.Errorf("locking the data dir %s: %w", dir, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
