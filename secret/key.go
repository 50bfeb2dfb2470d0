package secret

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// KeySize is the size of the key file: an AES-256 key.
const KeySize = 32

// KeyFile is the key's name in the data dir.
const KeyFile = "secret.key"

// Key is the key that seals every secret of a service. It prints as
// "secret.Key(redacted)" however it is formatted or logged.
type Key struct{ b *[KeySize]byte }

func (Key) String() string       { return "secret.Key(redacted)" }
func (Key) GoString() string     { return "secret.Key(redacted)" }
func (Key) LogValue() slog.Value { return slog.StringValue("secret.Key(redacted)") }
func (k Key) valid() bool        { return k.b != nil }
func (k Key) bytes() []byte      { return k.b[:] }
func keyOf(b []byte) (Key, error) { // for LoadKey and the tests
	if len(b) != KeySize {
		return Key{}, fmt.Errorf("a key of %d bytes, want %d", len(b), KeySize)
	}
	k := Key{b: new([KeySize]byte)}
	copy(k.b[:], b)
	return k, nil
}

// LoadKey reads the key at path, making one (32 random bytes, mode 0600)
// if there is none. It refuses a key that is not a regular file of 32
// bytes owned by this process's user with mode 0600 or stricter, and a
// symbolic link: each error says what to do. The path is the operator's
// (the data dir), never a tenant's or a sandbox's.
func LoadKey(path string) (Key, error) {
	k, err := readKey(path)
	if errors.Is(err, os.ErrNotExist) {
		return makeKey(path)
	}
	return k, err
}

func readKey(path string) (Key, error) {
	// O_NOFOLLOW: a link is refused, not followed; O_NONBLOCK: a fifo
	// put there does not hang the start.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) {
		return Key{}, fmt.Errorf("secret key %s is a symbolic link: the key must be a regular file in the data dir; replace the link by the file it points to (mode 0600)", path)
	}
	if errors.Is(err, unix.ENOENT) {
		return Key{}, os.ErrNotExist
	}
	if err != nil {
		return Key{}, fmt.Errorf("secret key %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Key{}, fmt.Errorf("secret key %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return Key{}, fmt.Errorf("secret key %s is not a regular file: move it away and restore the key from a backup (without it the stored secrets cannot be opened)", path)
	}
	if int(st.Uid) != os.Geteuid() {
		return Key{}, fmt.Errorf("secret key %s is owned by uid %d, not by this process's %d: chown %d %s", path, st.Uid, os.Geteuid(), os.Geteuid(), path)
	}
	if perm := st.Mode & 0o7777; perm&0o077 != 0 {
		return Key{}, fmt.Errorf("secret key %s has mode %04o, which lets other users read it: chmod 600 %s (and consider the secrets it sealed exposed)", path, perm, path)
	}
	if st.Size != KeySize {
		return Key{}, fmt.Errorf("secret key %s has %d bytes, not %d: it is not a reins key; restore the right one from a backup, or move it away to start with a new key (the secrets sealed with the old one are then lost: set them again)", path, st.Size, KeySize)
	}
	b := make([]byte, KeySize+1)
	n, err := io.ReadFull(f, b)
	if err != io.ErrUnexpectedEOF || n != KeySize {
		return Key{}, fmt.Errorf("secret key %s changed while it was read (%d bytes): start again", path, n)
	}
	return keyOf(b[:KeySize])
}

// makeKey writes a new key beside path and links it into place, so that
// a crash leaves either no key or a whole one, and a key another process
// made at the same moment wins over this one.
func makeKey(path string) (Key, error) {
	b := make([]byte, KeySize)
	if _, err := rand.Read(b); err != nil {
		return Key{}, fmt.Errorf("making the secret key: %w", err)
	}
	// A temporary name of its own (0600): two processes making the key
	// at once never touch each other's file.
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return Key{}, fmt.Errorf("making the secret key: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Key{}, fmt.Errorf("making the secret key: %w", err)
	}
	if err := os.Link(tmp, path); errors.Is(err, os.ErrExist) {
		return readKey(path)
	} else if err != nil {
		return Key{}, fmt.Errorf("making the secret key: %w", err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return readKey(path)
}
