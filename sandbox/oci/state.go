package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A sandbox's record is a directory, <state dir>/sandboxes/<id>, that holds
// everything the backend knows about it, so that a new process of the
// service can take over:
//
//	config.json   the OCI spec (this directory is the runtime's bundle)
//	shim.json     what the shim runs (shimConfig)
//	shim.ref      the shim's pid and start time, written by Start
//	pid           the runtime's pid file
//	started.json  init and shim pids with their start times (procRef)
//	exit.json     how the init ended (exitRecord), written by the shim
//	killed        present once Kill has sent SIGKILL
const (
	fileConfig  = "config.json"
	fileShim    = "shim.json"
	fileShimRef = "shim.ref"
	filePid     = "pid"
	fileStarted = "started.json"
	fileExit    = "exit.json"
	fileKilled  = "killed"
)

// procRef names a process in a way that survives pid reuse: a pid and the
// time (in clock ticks after boot) the kernel started it.
type procRef struct {
	Pid   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// started is written by the shim once the init runs.
type started struct {
	Version int     `json:"version"`
	Init    procRef `json:"init"`
	Shim    procRef `json:"shim"`
}

// exitRecord is written by the shim when the init has ended.
type exitRecord struct {
	Version  int    `json:"version"`
	ExitCode int    `json:"exit_code"`        // 128+signal when killed by a signal
	Signal   int    `json:"signal,omitempty"` // the signal that killed it
	OOMKills int    `json:"oom_kills"`        // the cgroup's OOM kill count when it ended
	Error    string `json:"error,omitempty"`  // why the init never ran
}

// alive reports whether the process r names still runs (a zombie counts as
// ended).
func (r procRef) alive() bool {
	if r.Pid <= 0 {
		return false
	}
	start, state, err := procStat(r.Pid)
	return err == nil && start == r.Start && state != 'Z' && state != 'X'
}

func refOf(pid int) (procRef, error) {
	start, _, err := procStat(pid)
	if err != nil {
		return procRef{}, err
	}
	return procRef{Pid: pid, Start: start}, nil
}

// procStat returns a process's start time and state letter from
// /proc/<pid>/stat.
func procStat(pid int) (start uint64, state byte, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) may hold spaces and parentheses; the
	// fields after the last ')' are plain.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	// f[0] is field 3 (state); start time is field 22.
	start, err = strconv.ParseUint(f[19], 10, 64)
	return start, f[0][0], err
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// writeJSON writes v to path atomically, so a reader never sees half a file.
func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func isNotExist(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOENT)
}

func recordPath(dir, name string) string { return filepath.Join(dir, name) }
