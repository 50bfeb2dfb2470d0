package files

import (
	"bufio"
	"bytes"
	"io"
	"io/fs"
	"strconv"
	"sync"
	"syscall"
	"time"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
)

// maxAccountFile bounds what is read of /etc/passwd and /etc/group: a
// sandbox's own files, but a listing must not read a huge one.
const maxAccountFile = 1 << 20

// accountNames maps ids to names as an account file (/etc/passwd or
// /etc/group, inside the root) has them, read again when the file
// changes.
type accountNames struct {
	name string // the file, in the tree

	mu      sync.Mutex
	checked time.Time
	mtime   time.Time
	size    int64
	names   map[uint32]string
}

// recheck is how often the file is looked at again: a listing of many
// entries stats it once, not once per entry (syscalls are gVisor's cost).
const recheck = time.Second

// lookup returns id's name, or "" when the file has none.
func (a *accountNames) lookup(t tree, id uint32) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if now := time.Now(); a.names != nil && now.Sub(a.checked) < recheck {
		return a.names[id]
	} else {
		a.checked = now
	}
	fi, err := t.Stat(a.name)
	if err != nil {
		a.names = nil
		return ""
	}
	if a.names == nil || !fi.ModTime().Equal(a.mtime) || fi.Size() != a.size {
		a.names, a.mtime, a.size = readAccounts(t, a.name), fi.ModTime(), fi.Size()
	}
	return a.names[id]
}

// readAccounts reads name:x:id:... lines; what does not parse is skipped.
func readAccounts(t tree, name string) map[uint32]string {
	names := map[uint32]string{}
	f, err := t.Open(name)
	if err != nil {
		return names
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, maxAccountFile))
	for sc.Scan() {
		fields := bytes.SplitN(sc.Bytes(), []byte(":"), 4)
		if len(fields) < 3 {
			continue
		}
		id, err := strconv.ParseUint(string(fields[2]), 10, 32)
		if err != nil {
			continue
		}
		if _, ok := names[uint32(id)]; !ok {
			names[uint32(id)] = validUTF8(string(fields[0]))
		}
	}
	return names
}

// setOwner fills info's uid, gid and their names.
func (f *FS) setOwner(info *executorv1.FileInfo, fi fs.FileInfo) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return
	}
	info.Uid, info.Gid = st.Uid, st.Gid
	info.Owner = f.users.lookup(f.tree, st.Uid)
	info.Group = f.groups.lookup(f.tree, st.Gid)
}
