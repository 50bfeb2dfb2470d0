package executor

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor/files"
)

// An account is a user of the sandbox's /etc/passwd that ExecRequest.user
// names, with its groups from /etc/group.
//
// The files are the sandbox's own, read through the executor's file
// service (so, outside a sandbox, confined to its root: a symbolic link to
// the host's /etc/passwd is refused) and bounded in size. What they say is
// believed: an image or a command may make "user" uid 0, and then the
// command runs as root. That is no escape, because the sandbox, not the
// account, is the boundary (docs/decisions/0055-exec-user.md).
type account struct {
	name   string
	uid    uint32
	gid    uint32
	groups []uint32 // supplementary, the primary gid included
	home   string
	shell  string
}

// maxAccountFile bounds what is read of /etc/passwd and /etc/group: a
// sandbox's files are hostile input, and real ones are a few KiB.
const maxAccountFile = 4 << 20

// maxUserName bounds a user name (useradd allows 32 characters).
const maxUserName = 64

// validUserName refuses what no /etc/passwd line can hold (":" and line
// breaks), what reads as a path or an option, and control characters.
func validUserName(name string) error {
	bad := name == "" || len(name) > maxUserName || name == "." || name == ".." || name[0] == '-'
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-' || r == '$') {
			bad = true
		}
	}
	if bad {
		return errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf(
			"user %q is not a valid user name: use at most %d letters, digits, '_', '.', '-' (not first) or a final '$'", name, maxUserName))
	}
	return nil
}

// lookupUser finds name in the sandbox's /etc/passwd and its groups in
// /etc/group.
func lookupUser(fsys *files.FS, name string) (*account, error) {
	if err := validUserName(name); err != nil {
		return nil, err
	}
	passwd, err := readAccountFile(fsys, "/etc/passwd", name)
	if err != nil {
		return nil, err
	}
	a, err := findPasswd(passwd, name)
	if err != nil {
		return nil, err
	}
	group, err := readAccountFile(fsys, "/etc/group", name)
	if errors.Is(err, errdefs.ErrNotFound) {
		return a, nil // no /etc/group: the primary group alone
	}
	if err != nil {
		return nil, err
	}
	a.groups = memberOf(group, name, a.gid)
	return a, nil
}

func readAccountFile(fsys *files.FS, p, user string) (string, error) {
	data, _, eof, err := fsys.ReadFile(p, 0, maxAccountFile)
	if err != nil {
		return "", fmt.Errorf("looking up user %q: %w", user, err)
	}
	if !eof {
		return "", errdefs.WithMessage(errdefs.ErrTooLarge, fmt.Sprintf(
			"looking up user %q: the sandbox's %s is larger than %d MiB; fix the file", user, p, maxAccountFile>>20))
	}
	return string(data), nil
}

// findPasswd parses the line "name:x:uid:gid:gecos:home:shell" of name.
func findPasswd(passwd, name string) (*account, error) {
	for line := range strings.Lines(passwd) {
		f := strings.Split(strings.TrimRight(line, "\r\n"), ":")
		if len(f) != 7 || f[0] != name {
			continue
		}
		uid, err1 := strconv.ParseUint(f[2], 10, 32)
		gid, err2 := strconv.ParseUint(f[3], 10, 32)
		if err := errors.Join(err1, err2); err != nil || !strings.HasPrefix(f[5], "/") {
			return nil, errdefs.WithMessage(errdefs.ErrFailedPrecondition, fmt.Sprintf(
				"user %q: its line in the sandbox's /etc/passwd is malformed (want name:x:uid:gid:gecos:/home:shell); fix the file", name))
		}
		return &account{name: name, uid: uint32(uid), gid: uint32(gid), groups: []uint32{uint32(gid)}, home: f[5], shell: f[6]}, nil
	}
	return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, fmt.Sprintf(
		"user %q is not in the sandbox's /etc/passwd; name an account of the sandbox (useradd makes one)", name))
}

// memberOf returns gid and the gids of the groups of /etc/group that list
// name as a member. Malformed lines are skipped, as libc does.
func memberOf(group, name string, gid uint32) []uint32 {
	gids := []uint32{gid}
	for line := range strings.Lines(group) {
		f := strings.Split(strings.TrimRight(line, "\r\n"), ":")
		if len(f) != 4 {
			continue
		}
		g, err := strconv.ParseUint(f[2], 10, 32)
		if err != nil {
			continue
		}
		for m := range strings.SplitSeq(f[3], ",") {
			if m == name && uint32(g) != gid && len(gids) < 64 {
				gids = append(gids, uint32(g))
			}
		}
	}
	return gids
}

// credential is what the process runs as; it fails, saying why, when the
// executor cannot switch to the account (it is not root, as it is in
// every reins sandbox, where it is the sandbox's uid 0).
func (a *account) credential() (*syscall.Credential, error) {
	if euid := os.Geteuid(); euid != 0 && uint32(euid) != a.uid {
		return nil, errdefs.WithMessage(errdefs.ErrFailedPrecondition, fmt.Sprintf(
			"cannot run as user %q (uid %d): the executor runs as uid %d, not root, and may not switch users; omit user", a.name, a.uid, euid))
	}
	return &syscall.Credential{Uid: a.uid, Gid: a.gid, Groups: a.groups}, nil
}

// env is the account's HOME, USER, LOGNAME and SHELL, less what the
// request's own env sets.
func (a *account) env(request []string) []string {
	shell := a.shell
	if shell == "" {
		shell = "/bin/sh"
	}
	var out []string
	for _, kv := range []string{"HOME=" + a.home, "USER=" + a.name, "LOGNAME=" + a.name, "SHELL=" + shell} {
		if k, _, _ := strings.Cut(kv, "="); !hasKey(request, k) {
			out = append(out, kv)
		}
	}
	return out
}
