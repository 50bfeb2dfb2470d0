package image

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The built-in images have a non-root account, "user" (uid and gid 1000,
// home /home/user), the one E2B's SDK runs commands as and the one
// ExecRequest.user names for commands that should not run as root.
const (
	UserName = "user"
	UserID   = 1000
	UserHome = "/home/user"
)

// userRecipe is added to the recipe (the source) of every image that
// has the account, so that stores built before it build again.
const userRecipe = "; account user 1000:1000 /home/user"

// addUser adds the account to the image root being built, with shell as
// its login shell, unless /etc/passwd has it already: passwd and group
// lines, shadow and gshadow lines (locked password) where those files
// exist, and the home directory with /etc/skel's files, all owned by it.
// root is the build's own directory, not a sandbox's.
func addUser(root, shell string) error {
	etc := filepath.Join(root, "etc")
	has, err := hasLine(filepath.Join(etc, "passwd"), UserName+":")
	if err != nil || has {
		return err
	}
	id := fmt.Sprint(UserID)
	for _, l := range []struct {
		file, line string
		optional   bool
	}{
		{"passwd", strings.Join([]string{UserName, "x", id, id, UserName, UserHome, shell}, ":"), false},
		{"group", UserName + ":x:" + id + ":", false},
		{"shadow", UserName + ":!::0:99999:7:::", true},
		{"gshadow", UserName + ":!::", true},
	} {
		p := filepath.Join(etc, l.file)
		if _, err := os.Lstat(p); l.optional && errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := appendLine(p, l.line); err != nil {
			return fmt.Errorf("adding the account %s: %w", UserName, err)
		}
	}
	home := filepath.Join(root, UserHome)
	if err := os.MkdirAll(home, 0o750); err != nil {
		return err
	}
	skel, _ := os.ReadDir(filepath.Join(etc, "skel"))
	for _, e := range skel {
		if e.Type().IsRegular() {
			if err := copyFile(filepath.Join(etc, "skel", e.Name()), filepath.Join(home, e.Name()), 0o644); err != nil {
				return err
			}
			if err := os.Lchown(filepath.Join(home, e.Name()), UserID, UserID); err != nil {
				return err
			}
		}
	}
	if err := os.Chmod(home, 0o750); err != nil {
		return err
	}
	return os.Lchown(home, UserID, UserID)
}

func hasLine(p, prefix string) (bool, error) {
	f, err := os.Open(p)
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			return true, nil
		}
	}
	return false, sc.Err()
}

// appendLine adds line to the file p, after a newline if p lacks a final one.
func appendLine(p, line string) error {
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		line = "\n" + line
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(line + "\n")
	return errors.Join(err, f.Close())
}
