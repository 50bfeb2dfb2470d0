package workspace

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/errdefs"
)

// Everything in an upper layer was written by the sandbox, and everything
// in a manifest came from one: these tests play the sandbox (racing the
// walk, planting links and special files) and an edited manifest.

// secretDir is a directory outside any workspace holding a file whose
// content must never reach a snapshot.
func secretDir(t *testing.T) (dir string, sum [32]byte) {
	dir = t.TempDir()
	secret := []byte("host secret that no snapshot may hold")
	writeFile(t, filepath.Join(dir, "secret"), secret, 0o600)
	for i := 0; i < 20; i++ {
		writeFile(t, filepath.Join(dir, fmt.Sprintf("f%02d", i)), secret, 0o600)
	}
	return dir, sha(secret)
}

func hasChunk(s *Store, sum [32]byte) bool {
	var st unix.Stat_t
	return unix.Fstatat(s.chunks, chunkName(sum), &st, 0) == nil
}

func TestHostileSymlinkWhereADirectoryWas(t *testing.T) {
	ctx := context.Background()
	outside, secret := secretDir(t)
	src := disk(t, 64<<20)
	must(t, os.Symlink(outside, filepath.Join(src, "etc")))
	must(t, os.Symlink(outside+"/secret", filepath.Join(src, "passwd")))
	s := store(t, "")
	snap, err := s.Capture(ctx, src, CaptureOptions{})
	must(t, err)
	if hasChunk(s, secret) || snap.Bytes != 0 || snap.Files != 2 {
		t.Fatalf("the walk followed a link out of the workspace: %+v", snap)
	}
	dst := disk(t, 64<<20)
	must(t, s.Restore(ctx, snap.Digest, dst, nil))
	if target, err := os.Readlink(filepath.Join(dst, "etc")); err != nil || target != outside {
		t.Errorf("restored etc = %q, %v; want the link kept verbatim", target, err)
	}
}

// The sandbox swaps a directory and a link out of the workspace back and
// forth (renameat2 RENAME_EXCHANGE, atomic) while captures walk: no
// capture reads through the link, whichever it finds.
func TestHostileDirectorySwappedForALinkMidWalk(t *testing.T) {
	ctx := context.Background()
	outside, secret := secretDir(t)
	src := disk(t, 64<<20)
	for i := 0; i < 20; i++ {
		writeFile(t, filepath.Join(src, "d", fmt.Sprintf("f%02d", i)), []byte("inside"), 0o644)
	}
	must(t, os.Symlink(outside, filepath.Join(src, "l")))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			unix.Renameat2(unix.AT_FDCWD, filepath.Join(src, "d"), unix.AT_FDCWD, filepath.Join(src, "l"), unix.RENAME_EXCHANGE)
		}
	}()
	s := store(t, "")
	for i := 0; i < 100; i++ {
		if _, err := s.Capture(ctx, src, CaptureOptions{}); err != nil {
			close(stop)
			wg.Wait()
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if hasChunk(s, secret) {
		t.Fatal("a capture read a file through a link swapped in for a directory")
	}
}

// A file swapped for a fifo mid-walk: the open must not block (and the
// fifo is not captured).
func TestHostileFileSwappedForAFifo(t *testing.T) {
	ctx := context.Background()
	src := disk(t, 64<<20)
	for i := 0; i < 50; i++ {
		writeFile(t, filepath.Join(src, fmt.Sprintf("f%02d", i)), []byte("file"), 0o644)
		must(t, unix.Mkfifo(filepath.Join(src, fmt.Sprintf("p%02d", i)), 0o644))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			unix.Renameat2(unix.AT_FDCWD, filepath.Join(src, fmt.Sprintf("f%02d", i%50)),
				unix.AT_FDCWD, filepath.Join(src, fmt.Sprintf("p%02d", i%50)), unix.RENAME_EXCHANGE)
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	s := store(t, "")
	done := make(chan error, 1)
	go func() {
		var err error
		var skipped int64
		for i := 0; i < 100 && err == nil; i++ {
			var snap Snapshot
			snap, err = s.Capture(ctx, src, CaptureOptions{})
			// Whatever a name was when the walk looked, a file (its 4
			// bytes) or a fifo (counted, never read).
			if err == nil && (snap.Files+snap.Skipped > 100 || snap.Bytes != 4*snap.Files) {
				err = fmt.Errorf("snapshot %+v of 50 files and 50 fifos", snap)
			}
			skipped += snap.Skipped
		}
		if err == nil && skipped == 0 {
			err = fmt.Errorf("100 captures counted no fifo")
		}
		done <- err
	}()
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("a capture blocked on a fifo swapped in for a file")
	}
}

// Sockets, fifos and device nodes are never captured, only counted; the
// rest of the tree is. The fifo has no writer: opening it would block.
func TestHostileSpecialFilesAreSkipped(t *testing.T) {
	ctx := context.Background()
	src := disk(t, 64<<20)
	writeFile(t, filepath.Join(src, "kept"), []byte("k"), 0o644)
	must(t, unix.Mkfifo(filepath.Join(src, "fifo"), 0o644))
	must(t, unix.Mknod(filepath.Join(src, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(t, unix.Mknod(filepath.Join(src, "blk"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0))))
	l, err := net.Listen("unix", filepath.Join(src, "sock"))
	must(t, err)
	defer l.Close()
	s := store(t, "")
	done := make(chan struct{})
	var snap Snapshot
	go func() {
		defer close(done)
		snap, err = s.Capture(ctx, src, CaptureOptions{})
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Capture blocked on a special file")
	}
	must(t, err)
	if snap.Skipped != 4 || snap.Files != 1 {
		t.Fatalf("snapshot %+v, want 4 skipped and 1 file", snap)
	}
	dst := disk(t, 64<<20)
	must(t, s.Restore(ctx, snap.Digest, dst, nil))
	ents, err := os.ReadDir(dst)
	must(t, err)
	if len(ents) != 1 || ents[0].Name() != "kept" {
		t.Errorf("restored %v, want only kept", ents)
	}
}

func TestHostileNames(t *testing.T) {
	ctx := context.Background()
	src := disk(t, 64<<20)
	names := []string{"line\nbreak", "\xff\xfe", "tab\there", "..hidden", "...", "-rf", " ", "back\\slash", "\x01\x7f", strings.Repeat("é", 127)}
	for _, n := range names {
		writeFile(t, filepath.Join(src, n, n), []byte(n), 0o644)
	}
	s := store(t, "")
	snap, err := s.Capture(ctx, src, CaptureOptions{})
	must(t, err)
	dst := disk(t, 64<<20)
	must(t, s.Restore(ctx, snap.Digest, dst, nil))
	sameTree(t, src, dst)
}

func TestHostileManyEntries(t *testing.T) {
	ctx := context.Background()
	src := disk(t, 2<<30)
	for d := 0; d < 100; d++ {
		dir := filepath.Join(src, fmt.Sprintf("d%03d", d))
		must(t, os.Mkdir(dir, 0o755))
		dfd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY, 0)
		must(t, err)
		for f := 0; f < 1000; f++ {
			fd, err := unix.Openat(dfd, fmt.Sprintf("f%04d", f), unix.O_CREAT|unix.O_WRONLY, 0o644)
			must(t, err)
			unix.Close(fd)
		}
		unix.Close(dfd)
	}
	s := store(t, "")
	_, err := s.Capture(ctx, src, CaptureOptions{MaxEntries: 50000})
	if !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), "50000 entries") {
		t.Fatalf("capture of 100k entries capped at 50k: %v", err)
	}
	snap, err := s.Capture(ctx, src, CaptureOptions{})
	must(t, err)
	if snap.Files != 100000 {
		t.Fatalf("snapshot %+v", snap)
	}
	dst := disk(t, 2<<30)
	must(t, s.Restore(ctx, snap.Digest, dst, nil))
	for d := 0; d < 100; d += 33 {
		ents, err := os.ReadDir(filepath.Join(dst, fmt.Sprintf("d%03d", d)))
		must(t, err)
		if len(ents) != 1000 || ents[999].Name() != "f0999" {
			t.Fatalf("restored d%03d holds %d entries", d, len(ents))
		}
	}
}

// deepTree nests n directories under root, fd-relative (the path is
// longer than PATH_MAX).
func deepTree(t *testing.T, root string, n int) {
	fd, err := unix.Open(root, unix.O_DIRECTORY|unix.O_RDONLY, 0)
	must(t, err)
	for i := 0; i < n; i++ {
		must(t, unix.Mkdirat(fd, "deeper-and-deeper", 0o755))
		nfd, err := unix.Openat(fd, "deeper-and-deeper", unix.O_DIRECTORY|unix.O_RDONLY, 0)
		must(t, err)
		unix.Close(fd)
		fd = nfd
	}
	unix.Close(fd)
}

func TestHostileDeepNesting(t *testing.T) {
	ctx := context.Background()
	s := store(t, "")
	ok := disk(t, 64<<20)
	deepTree(t, ok, MaxDepth-2)
	snap, err := s.Capture(ctx, ok, CaptureOptions{})
	must(t, err)
	dst := disk(t, 64<<20)
	must(t, s.Restore(ctx, snap.Digest, dst, nil))

	src := disk(t, 64<<20)
	deepTree(t, src, MaxDepth+50)
	_, err = s.Capture(ctx, src, CaptureOptions{})
	if !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), "nest deeper than") {
		t.Fatalf("capture of %d nested directories: %v", MaxDepth+50, err)
	}
	// A manifest that nests deeper is refused too.
	recs := []entry{dirRec("")}
	for i := 0; i < MaxDepth+5; i++ {
		recs = append(recs, dirRec("d"))
	}
	for i := 0; i < MaxDepth+6; i++ {
		recs = append(recs, entry{kind: kEnd})
	}
	err = s.Restore(ctx, craft(t, s, recs, nil), disk(t, 64<<20), nil)
	if !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), "nest deeper") {
		t.Fatalf("restore of a manifest nesting deeper than the cap: %v", err)
	}
}

// A file of the disk outside the upper layer, hard-linked into it, is
// captured as a file of its own (its content is the sandbox's to keep),
// and restored as one: no link leads out.
func TestHostileHardLinkToAFileOutside(t *testing.T) {
	ctx := context.Background()
	src := disk(t, 64<<20)
	outside := filepath.Join(filepath.Dir(src), "outside")
	writeFile(t, outside, []byte("outside the upper"), 0o644)
	must(t, os.Link(outside, filepath.Join(src, "in")))
	s := store(t, "")
	snap, err := s.Capture(ctx, src, CaptureOptions{})
	must(t, err)
	dst := disk(t, 64<<20)
	must(t, s.Restore(ctx, snap.Digest, dst, nil))
	var st unix.Stat_t
	must(t, unix.Stat(filepath.Join(dst, "in"), &st))
	if b, _ := os.ReadFile(filepath.Join(dst, "in")); string(b) != "outside the upper" || st.Nlink != 1 {
		t.Errorf("restored in = %q with %d links", b, st.Nlink)
	}

	// Edited manifests: a hard link to a directory, to a file not marked
	// as linked, and to a later entry.
	for what, recs := range map[string][]entry{
		"to a directory":      {dirRec(""), dirRec("d"), {kind: kEnd}, {kind: kLink, name: "l", link: 1}, {kind: kEnd}},
		"to an unmarked file": {dirRec(""), fileRec("f", nil), {kind: kLink, name: "l", link: 1}, {kind: kEnd}},
		"to a later entry":    {dirRec(""), {kind: kLink, name: "a", link: 2}, fileRec("b", nil), {kind: kEnd}},
		"to itself":           {dirRec(""), {kind: kLink, name: "a", link: 1}, {kind: kEnd}},
	} {
		dst := disk(t, 64<<20)
		err := s.Restore(ctx, craft(t, s, recs, nil), dst, nil)
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("hard link %s: %v", what, err)
		}
		if ents, _ := os.ReadDir(dst); len(ents) != 0 {
			t.Errorf("hard link %s: a refused restore left %v", what, ents)
		}
	}
}

// Edited manifests naming what is not one file name, or writing through a
// link, are refused before anything is written outside the new upper.
func TestHostileManifestNames(t *testing.T) {
	ctx := context.Background()
	s := store(t, "")
	outside, _ := secretDir(t)
	for what, recs := range map[string][]entry{
		"../x":                 {dirRec(""), fileRec("../x", nil), {kind: kEnd}},
		"..":                   {dirRec(""), dirRec(".."), fileRec("x", nil), {kind: kEnd}, {kind: kEnd}},
		"a/b":                  {dirRec(""), fileRec("a/b", nil), {kind: kEnd}},
		"absolute":             {dirRec(""), fileRec(outside+"/x", nil), {kind: kEnd}},
		"empty":                {dirRec(""), fileRec("", nil), {kind: kEnd}},
		"NUL":                  {dirRec(""), fileRec("a\x00b", nil), {kind: kEnd}},
		"a link as a parent":   {dirRec(""), linkRec("a", outside), dirRec("a"), fileRec("x", nil), {kind: kEnd}, {kind: kEnd}},
		"a repeated name":      {dirRec(""), fileRec("a", nil), fileRec("a", nil), {kind: kEnd}},
		"names out of order":   {dirRec(""), fileRec("b", nil), fileRec("a", nil), {kind: kEnd}},
		"a device":             {dirRec(""), {kind: kWhiteout, name: "sda", meta: meta{mode: unix.S_IFBLK | 0o600}}, {kind: kEnd}},
		"a fifo as a file":     {dirRec(""), {kind: kFile, name: "p", meta: meta{mode: unix.S_IFIFO | 0o600}}, {kind: kEnd}},
		"no top directory":     {fileRec("x", nil)},
		"after the top closes": {dirRec(""), {kind: kEnd}, fileRec("x", nil)},
		"an overlay origin":    {dirRec(""), {kind: kDir, name: "d", meta: meta{mode: unix.S_IFDIR | 0o755, xattrs: []xattr{{"trusted.overlay.origin", "x"}}}}, {kind: kEnd}, {kind: kEnd}},
	} {
		dst := disk(t, 64<<20)
		err := s.Restore(ctx, craft(t, s, recs, nil), dst, nil)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "damaged") {
			t.Errorf("manifest with %s: %v", what, err)
		}
		if ents, _ := os.ReadDir(dst); len(ents) != 0 {
			t.Errorf("manifest with %s: a refused restore left %v", what, ents)
		}
		if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
			t.Fatalf("manifest with %s wrote outside the new workspace", what)
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(dst), "x")); err == nil {
			t.Fatalf("manifest with %s wrote beside the new workspace", what)
		}
	}
}

// Chunks and sizes that do not add up, and counts past every bound.
func TestHostileManifestSizes(t *testing.T) {
	ctx := context.Background()
	s := store(t, "")
	data := []byte("twelve bytes")
	sum, _ := s.putChunk(sha(data), data)
	_ = sum
	ok := chunkRef{off: 0, n: int64(len(data)), sum: sha(data)}
	big := func(mut func(*entry)) []entry {
		f := fileRec("f", []chunkRef{ok})
		f.size = int64(len(data))
		mut(&f)
		return []entry{dirRec(""), f, {kind: kEnd}}
	}
	for what, recs := range map[string][]entry{
		"a chunk past the size":     big(func(f *entry) { f.size = 5 }),
		"a chunk across the grid":   big(func(f *entry) { f.chunks[0].off = ChunkSize - 4; f.size = ChunkSize + 100 }),
		"two chunks in one cell":    big(func(f *entry) { f.chunks = append(f.chunks, chunkRef{off: 20, n: 12, sum: ok.sum}); f.size = 100 }),
		"an empty chunk":            big(func(f *entry) { f.chunks[0].n = 0 }),
		"a huge chunk":              big(func(f *entry) { f.chunks[0].n = ChunkSize + 1; f.size = 1 << 30 }),
		"a huge extended attribute": big(func(f *entry) { f.meta.xattrs = []xattr{{"user.x", strings.Repeat("v", maxXattrValue+1)}} }),
		"too many extended attributes": big(func(f *entry) {
			for i := 0; i <= maxXattrs; i++ {
				f.meta.xattrs = append(f.meta.xattrs, xattr{fmt.Sprintf("user.%d", i), ""})
			}
		}),
	} {
		err := s.Restore(ctx, craft(t, s, recs, nil), disk(t, 64<<20), nil)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "damaged") {
			t.Errorf("manifest with %s: %v", what, err)
		}
	}
	// A chunk whose length in the manifest is not the stored one's.
	short := big(func(f *entry) { f.chunks[0].n = 6; f.size = 12 })
	err := s.Restore(ctx, craft(t, s, short, nil), disk(t, 64<<20), nil)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `"/f"`) {
		t.Errorf("manifest with a chunk length that is not the chunk's: %v", err)
	}
	// A trailer whose counts lie.
	lie := trailer{entries: 1 << 40, files: 1, bytes: 12}
	err = s.Restore(ctx, craft(t, s, big(func(*entry) {}), &lie), disk(t, 64<<20), nil)
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("manifest whose trailer lies: %v", err)
	}
	// The well-formed one restores.
	dst := disk(t, 64<<20)
	must(t, s.Restore(ctx, craft(t, s, big(func(*entry) {}), nil), dst, nil))
	if b, _ := os.ReadFile(filepath.Join(dst, "f")); !bytes.Equal(b, data) {
		t.Errorf("restored %q", b)
	}
}

// captured is a store holding a snapshot of one file, name, of data.
func captured(t *testing.T, name string, data []byte) (*Store, Snapshot) {
	s := store(t, "")
	src := disk(t, 128<<20)
	writeFile(t, filepath.Join(src, name), data, 0o644)
	snap, err := s.Capture(context.Background(), src, CaptureOptions{})
	must(t, err)
	return s, snap
}

func TestHostileDamagedStore(t *testing.T) {
	ctx := context.Background()
	s, snap := captured(t, "dir/file", pattern("content", 3*ChunkSize))
	hexd := strings.TrimPrefix(snap.Digest, "sha256:")
	mpath := filepath.Join(s.dir, "manifests", hexd)
	orig, err := os.ReadFile(mpath)
	must(t, err)

	// A chunk whose bytes do not match its digest.
	cpath := filepath.Join(s.dir, "chunks", chunkName(sha(pattern("content", 3*ChunkSize)[ChunkSize:2*ChunkSize])))
	good, err := os.ReadFile(cpath)
	must(t, err)
	bad := bytes.Clone(good)
	bad[1000] ^= 1
	must(t, os.WriteFile(cpath, bad, 0o400))
	dst := disk(t, 64<<20)
	err = s.Restore(ctx, snap.Digest, dst, nil)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "damaged") || !strings.Contains(err.Error(), `"/dir/file"`) {
		t.Errorf("restore with a damaged chunk: %v", err)
	}
	if ents, _ := os.ReadDir(dst); len(ents) != 0 {
		t.Errorf("a failed restore left %v", ents)
	}
	must(t, os.WriteFile(cpath, good, 0o400))

	// A truncated manifest, and one with a flipped byte.
	for what, b := range map[string][]byte{
		"truncated":          orig[:len(orig)/2],
		"cut before its end": orig[:len(orig)-3],
		"flipped":            append(append(bytes.Clone(orig[:40]), orig[40]^0x40), orig[41:]...),
	} {
		must(t, os.WriteFile(mpath, b, 0o400))
		dst := disk(t, 64<<20)
		err := s.Restore(ctx, snap.Digest, dst, nil)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "damaged") {
			t.Errorf("restore of a %s manifest: %v", what, err)
		}
		if ents, _ := os.ReadDir(dst); len(ents) != 0 {
			t.Errorf("restore of a %s manifest left %v", what, ents)
		}
	}
	must(t, os.WriteFile(mpath, orig, 0o400))
	must(t, s.Restore(ctx, snap.Digest, disk(t, 64<<20), nil))
}

// A disk too small for the workspace: the restore says so, names the
// entry, and leaves the disk empty.
func TestHostileRestoreOntoAFullDisk(t *testing.T) {
	ctx := context.Background()
	s, snap := captured(t, "big", pattern("big", 40*ChunkSize))
	dst := disk(t, 16<<20)
	_, err := s.RestoreAs(ctx, snap.Digest, dst, nil)
	if !errors.Is(err, errdefs.ErrNoSpace) || !strings.Contains(err.Error(), `"/big"`) || !strings.Contains(err.Error(), "too small") {
		t.Fatalf("restore of 40 MiB onto 16 MiB: %v", err)
	}
	if ents, _ := os.ReadDir(dst); len(ents) != 0 {
		t.Errorf("a failed restore left %v", ents)
	}
	if ents, _ := readDir(s.manifests, 100, make([]byte, 4096)); len(ents) != 1 {
		t.Errorf("a failed RestoreAs left a manifest: %v", ents)
	}
}

// A store whose disk fills: the capture fails as resource exhausted,
// naming no host path, and leaves no snapshot.
func TestHostileCaptureIntoAFullStore(t *testing.T) {
	ctx := context.Background()
	storeDisk := disk(t, 16<<20)
	s := store(t, filepath.Join(storeDisk, "ws"))
	src := disk(t, 128<<20)
	writeFile(t, filepath.Join(src, "big"), pattern("big", 40*ChunkSize), 0o644)
	_, err := s.Capture(ctx, src, CaptureOptions{})
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "workspace store is full") || strings.Contains(err.Error(), storeDisk) {
		t.Fatalf("capture into a full store: %v", err)
	}
	ents, err := readDir(s.manifests, 100, make([]byte, 4096))
	must(t, err)
	if len(ents) != 0 {
		t.Errorf("a failed capture left manifests %v", ents)
	}
	// Its chunks are collectable; then a small capture fits.
	freed, err := s.Collect(ctx, nil)
	must(t, err)
	if freed < 5*ChunkSize {
		t.Errorf("collect after a failed capture freed only %d bytes", freed)
	}
	must(t, os.Remove(filepath.Join(src, "big")))
	writeFile(t, filepath.Join(src, "small"), []byte("fits"), 0o644)
	_, err = s.Capture(ctx, src, CaptureOptions{})
	must(t, err)
}

// A store that fills while many files are read at once: whichever
// file's chunk finds the disk full, the capture says the store is full,
// never "context canceled" (the other files' reads stopping because of it;
// an earlier file stopped so used to be the error reported).
func TestHostileCaptureOfManyFilesIntoAFullStore(t *testing.T) {
	ctx := context.Background()
	storeDisk := disk(t, 16<<20)
	s := store(t, filepath.Join(storeDisk, "ws"))
	src := disk(t, 128<<20)
	for i := range 48 {
		writeFile(t, filepath.Join(src, fmt.Sprintf("f%02d", i)), pattern(fmt.Sprint(i), 2*ChunkSize), 0o644)
	}
	for try := range 8 {
		_, err := s.Capture(ctx, src, CaptureOptions{})
		if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "workspace store is full") {
			t.Fatalf("try %d: capture of 96 MiB in 48 files into 16 MiB: %v", try, err)
		}
		if _, err := s.Collect(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func dirRec(name string) entry {
	return entry{kind: kDir, name: name, meta: meta{mode: unix.S_IFDIR | 0o755}}
}

func fileRec(name string, chunks []chunkRef) entry {
	return entry{kind: kFile, name: name, meta: meta{mode: unix.S_IFREG | 0o644}, chunks: chunks}
}

func linkRec(name, target string) entry {
	return entry{kind: kSymlink, name: name, target: target, meta: meta{mode: unix.S_IFLNK | 0o777}}
}

// craft stores a manifest of recs as they are (the encoder checks
// nothing), with a trailer that adds up unless tr is given, and returns
// its digest.
func craft(t *testing.T, s *Store, recs []entry, tr *trailer) string {
	t.Helper()
	var buf bytes.Buffer
	enc := newEncoder(&buf)
	var auto trailer
	for i := range recs {
		must(t, enc.entry(&recs[i]))
		switch recs[i].kind {
		case kEnd:
		case kDir:
			auto.entries++
		default:
			auto.entries++
			auto.files++
			auto.bytes += recs[i].dataBytes()
		}
	}
	if tr == nil {
		tr = &auto
	}
	must(t, enc.finish(*tr))
	sum := sha256.Sum256(buf.Bytes())
	hexd := hex.EncodeToString(sum[:])
	must(t, os.WriteFile(filepath.Join(s.dir, "manifests", hexd), buf.Bytes(), 0o400))
	return "sha256:" + hexd
}
