package workspace

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/reinsdev/reins/errdefs"
)

// A manifest is a header, then one record per entry of the tree in walk
// order (a directory, then its children sorted by name, then an end
// record), then a fixed-size trailer. Integers are unsigned varints
// unless said otherwise; bytes are a varint length and the bytes.
//
//	header   "reins-workspace\n" version(1 byte, 1)
//	record   kind(1 byte) name(bytes) meta kind-specific
//	         (the end record 'e' is the kind alone; the first record is
//	         the top directory, with an empty name)
//	meta     mode uid gid atime mtime ctime ino nxattr {name value}
//	         (times: seconds as a signed varint, then nanoseconds)
//	'd'      directory: nothing more
//	'f'      file: size flags(1 byte: 1 = hard-linked) nchunks
//	         {gap length digest(32 bytes)}, gap = offset - end of the
//	         previous chunk; each chunk lies in one cell of the ChunkSize
//	         grid, cells strictly increasing, all within size
//	'l'      symbolic link: target(bytes)
//	'w'      overlay whiteout (a 0:0 character device)
//	'h'      hard link (name only, no meta): target entry number (every
//	         record but 'e' is numbered from 0, the top directory)
//	trailer  't' entries files bytes skipped (8-byte little endian
//	         each) "RWSTRAIL"
//
// ino and ctime are the capture's own (to skip unchanged files next time)
// and are not restored.
const (
	magic       = "reins-workspace\n"
	version     = 1
	trailerTag  = "RWSTRAIL"
	trailerSize = 1 + 4*8 + len(trailerTag)
)

const (
	kDir      = 'd'
	kFile     = 'f'
	kSymlink  = 'l'
	kWhiteout = 'w'
	kLink     = 'h'
	kEnd      = 'e'
	kTrailer  = 't'
)

const flagLinked = 1

type xattr struct{ name, value string }

type meta struct {
	mode, uid, gid      uint32
	atime, mtime, ctime unix.Timespec
	ino                 uint64
	xattrs              []xattr
}

type chunkRef struct {
	off, n int64
	sum    [32]byte
}

// entry is one record.
type entry struct {
	kind   byte
	name   string
	meta   meta
	size   int64
	linked bool
	chunks []chunkRef
	target string // symbolic link
	link   uint64 // hard link: target entry number
}

func (e *entry) dataBytes() int64 {
	var n int64
	for _, c := range e.chunks {
		n += c.n
	}
	return n
}

type trailer struct{ entries, files, bytes, skipped int64 }

// encoder writes a manifest.
type encoder struct {
	w   *bufio.Writer
	buf []byte
}

func newEncoder(w io.Writer) *encoder {
	e := &encoder{w: bufio.NewWriterSize(w, 256<<10)}
	e.w.WriteString(magic)
	e.w.WriteByte(version)
	return e
}

func (e *encoder) uvarint(v uint64) { e.buf = binary.AppendUvarint(e.buf, v) }
func (e *encoder) str(s string)     { e.uvarint(uint64(len(s))); e.buf = append(e.buf, s...) }
func (e *encoder) ts(t unix.Timespec) {
	e.buf = binary.AppendVarint(e.buf, t.Sec)
	e.uvarint(uint64(t.Nsec))
}

func (e *encoder) entry(x *entry) error {
	e.buf = append(e.buf[:0], x.kind)
	if x.kind != kEnd {
		e.str(x.name)
	}
	switch x.kind {
	case kLink:
		e.uvarint(x.link)
	case kDir, kFile, kSymlink, kWhiteout:
		m := &x.meta
		e.uvarint(uint64(m.mode))
		e.uvarint(uint64(m.uid))
		e.uvarint(uint64(m.gid))
		e.ts(m.atime)
		e.ts(m.mtime)
		e.ts(m.ctime)
		e.uvarint(m.ino)
		e.uvarint(uint64(len(m.xattrs)))
		for _, a := range m.xattrs {
			e.str(a.name)
			e.str(a.value)
		}
	}
	switch x.kind {
	case kFile:
		e.uvarint(uint64(x.size))
		var flags byte
		if x.linked {
			flags |= flagLinked
		}
		e.buf = append(e.buf, flags)
		e.uvarint(uint64(len(x.chunks)))
		var end int64
		for _, c := range x.chunks {
			e.uvarint(uint64(c.off - end))
			e.uvarint(uint64(c.n))
			e.buf = append(e.buf, c.sum[:]...)
			end = c.off + c.n
		}
	case kSymlink:
		e.str(x.target)
	}
	_, err := e.w.Write(e.buf)
	return err
}

func (e *encoder) finish(t trailer) error {
	b := append(e.buf[:0], kTrailer)
	for _, v := range []int64{t.entries, t.files, t.bytes, t.skipped} {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	b = append(b, trailerTag...)
	if _, err := e.w.Write(b); err != nil {
		return err
	}
	return e.w.Flush()
}

// readTrailer reads the trailer of the manifest f without reading the rest.
func readTrailer(f *os.File) (trailer, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return trailer{}, err
	}
	b := make([]byte, trailerSize)
	if st.Size < int64(len(magic)+1+trailerSize) {
		return trailer{}, damaged("it is too short to be a manifest")
	}
	if _, err := f.ReadAt(b, st.Size-int64(trailerSize)); err != nil {
		return trailer{}, err
	}
	return parseTrailer(b)
}

func parseTrailer(b []byte) (trailer, error) {
	if b[0] != kTrailer || string(b[trailerSize-len(trailerTag):]) != trailerTag {
		return trailer{}, damaged("its trailer is missing (a truncated manifest)")
	}
	var v [4]int64
	for i := range v {
		v[i] = int64(binary.LittleEndian.Uint64(b[1+8*i:]))
		if v[i] < 0 {
			return trailer{}, damaged("its trailer holds a negative count")
		}
	}
	return trailer{v[0], v[1], v[2], v[3]}, nil
}

func damaged(why string) error {
	return errdefs.WithMessage(errdefs.ErrInvalidArgument, "the snapshot's manifest is damaged: "+why)
}

// decoder reads a manifest, checking every bound and the tree's shape as
// it goes (see format above). It hashes what it reads; verify compares.
type decoder struct {
	r        *bufio.Reader
	h        hash.Hash
	depth    int
	n        int64 // entries numbered so far
	max      int64
	done     bool
	trailer  trailer
	files    int64
	content  int64
	scratch  []byte
	lastName []string // per open directory, the previous child's name
}

func newDecoder(r io.Reader, h hash.Hash, maxEntries int64) (*decoder, error) {
	d := &decoder{r: bufio.NewReaderSize(io.TeeReader(r, h), 256<<10), h: h, max: maxEntries}
	hdr := make([]byte, len(magic)+1)
	if _, err := io.ReadFull(d.r, hdr); err != nil {
		return nil, damaged("its header is missing")
	}
	if string(hdr[:len(magic)]) != magic {
		return nil, damaged("it is not a workspace manifest")
	}
	if hdr[len(magic)] != version {
		return nil, damaged(fmt.Sprintf("version %d is not one this service reads", hdr[len(magic)]))
	}
	return d, nil
}

var errTrunc = damaged("it ends inside an entry (a truncated manifest)")

func (d *decoder) uvarint() (uint64, error) {
	v, err := binary.ReadUvarint(d.r)
	if err != nil {
		return 0, errTrunc
	}
	return v, nil
}

func (d *decoder) small(max uint64, what string) (uint64, error) {
	v, err := d.uvarint()
	if err == nil && v > max {
		err = damaged(fmt.Sprintf("%s %d is out of range", what, v))
	}
	return v, err
}

func (d *decoder) str(max int, what string) (string, error) {
	n, err := d.small(uint64(max), what+" length")
	if err != nil {
		return "", err
	}
	if cap(d.scratch) < int(n) {
		d.scratch = make([]byte, n)
	}
	b := d.scratch[:n]
	if _, err := io.ReadFull(d.r, b); err != nil {
		return "", errTrunc
	}
	return string(b), nil
}

func (d *decoder) ts() (unix.Timespec, error) {
	s, err := binary.ReadVarint(d.r)
	if err != nil {
		return unix.Timespec{}, errTrunc
	}
	ns, err := d.small(999999999, "nanoseconds")
	return unix.Timespec{Sec: s, Nsec: int64(ns)}, err
}

// next returns the next record; after the trailer, io.EOF.
func (d *decoder) next(e *entry) error {
	if d.done {
		return io.EOF
	}
	kind, err := d.r.ReadByte()
	if err != nil {
		return errTrunc
	}
	*e = entry{kind: kind, chunks: e.chunks[:0], meta: meta{xattrs: e.meta.xattrs[:0]}}
	switch kind {
	case kTrailer:
		return d.finish()
	case kEnd:
		if d.depth == 0 {
			return damaged("it closes more directories than it opens")
		}
		d.depth--
		d.lastName = d.lastName[:len(d.lastName)-1]
		return nil
	case kDir, kFile, kSymlink, kWhiteout, kLink:
	default:
		return damaged(fmt.Sprintf("it holds an entry of unknown kind %q", kind))
	}
	if d.n >= d.max {
		return errdefs.WithMessage(errdefs.ErrTooLarge, fmt.Sprintf("the snapshot holds more than %d entries, the cap", d.max))
	}
	d.n++
	if e.name, err = d.str(maxName, "name"); err != nil {
		return err
	}
	if err := d.checkName(e); err != nil {
		return err
	}
	if kind == kLink {
		e.link, err = d.uvarint()
		if err == nil && e.link >= uint64(d.n-1) {
			err = damaged(fmt.Sprintf("hard link %q points at entry %d, not an earlier one", e.name, e.link))
		}
		d.files++
		return err
	}
	if err := d.meta(&e.meta, kind); err != nil {
		return err
	}
	switch kind {
	case kDir:
		if d.depth >= MaxDepth {
			return errdefs.WithMessage(errdefs.ErrTooLarge, fmt.Sprintf("its directories nest deeper than %d levels, the cap", MaxDepth))
		}
		d.depth++
		d.lastName = append(d.lastName, "")
		return nil
	case kSymlink:
		e.target, err = d.str(maxPath, "link target")
		if err == nil && (e.target == "" || bytes.IndexByte([]byte(e.target), 0) >= 0) {
			err = damaged(fmt.Sprintf("symbolic link %q has an empty target or a NUL byte in it", e.name))
		}
	case kFile:
		err = d.file(e)
	}
	if kind != kDir {
		d.files++
	}
	return err
}

// checkName checks that e's name is one component and, except for the
// top directory, that it comes after its sibling before.
func (d *decoder) checkName(e *entry) error {
	if d.n == 1 {
		if e.kind != kDir || e.name != "" {
			return damaged("it does not start with the top directory")
		}
		return nil
	}
	if d.depth == 0 {
		return damaged("it holds an entry after the top directory is closed")
	}
	n := e.name
	if n == "" || n == "." || n == ".." || bytes.IndexByte([]byte(n), '/') >= 0 || bytes.IndexByte([]byte(n), 0) >= 0 {
		return damaged(fmt.Sprintf("it holds the name %q, which is not one file name (empty, \".\", \"..\", or with \"/\" or NUL)", n))
	}
	last := &d.lastName[len(d.lastName)-1]
	if *last != "" && n <= *last {
		return damaged(fmt.Sprintf("the name %q is out of order or repeated", n))
	}
	*last = n
	return nil
}

func (d *decoder) meta(m *meta, kind byte) error {
	var v [3]uint64
	var err error
	for i := range v {
		if v[i], err = d.small(1<<32-1, "mode or owner"); err != nil {
			return err
		}
	}
	m.mode, m.uid, m.gid = uint32(v[0]), uint32(v[1]), uint32(v[2])
	want := map[byte]uint32{kDir: unix.S_IFDIR, kFile: unix.S_IFREG, kSymlink: unix.S_IFLNK, kWhiteout: unix.S_IFCHR}[kind]
	if m.mode&unix.S_IFMT != want || m.mode&^(unix.S_IFMT|0o7777) != 0 {
		return damaged(fmt.Sprintf("mode %#o does not fit an entry of kind %q", m.mode, kind))
	}
	for _, t := range []*unix.Timespec{&m.atime, &m.mtime, &m.ctime} {
		if *t, err = d.ts(); err != nil {
			return err
		}
	}
	if m.ino, err = d.uvarint(); err != nil {
		return err
	}
	n, err := d.small(maxXattrs, "extended attribute count")
	if err != nil {
		return err
	}
	total := 0
	for i := uint64(0); i < n; i++ {
		var a xattr
		if a.name, err = d.str(maxName, "extended attribute name"); err != nil {
			return err
		}
		if a.value, err = d.str(maxXattrValue, "extended attribute value"); err != nil {
			return err
		}
		if total += len(a.name) + len(a.value); total > maxXattrTotal {
			return damaged("an entry's extended attributes are larger than the cap")
		}
		if !keepXattr(a.name) {
			return damaged(fmt.Sprintf("it holds the extended attribute %q, which snapshots never carry", a.name))
		}
		m.xattrs = append(m.xattrs, a)
	}
	return nil
}

func (d *decoder) file(e *entry) error {
	size, err := d.small(1<<62, "file size")
	if err != nil {
		return err
	}
	e.size = int64(size)
	flags, err := d.r.ReadByte()
	if err != nil {
		return errTrunc
	}
	e.linked = flags&flagLinked != 0
	n, err := d.small(maxFileChunks, "chunk count")
	if err != nil {
		return err
	}
	var end int64
	cell := int64(-1)
	for i := uint64(0); i < n; i++ {
		gap, err := d.small(1<<62, "chunk offset")
		if err != nil {
			return err
		}
		ln, err := d.small(ChunkSize, "chunk length")
		if err != nil {
			return err
		}
		c := chunkRef{off: end + int64(gap), n: int64(ln)}
		if _, err := io.ReadFull(d.r, c.sum[:]); err != nil {
			return errTrunc
		}
		first, last := c.off/ChunkSize, (c.off+c.n-1)/ChunkSize
		if c.n == 0 || first != last || first <= cell || c.off+c.n > e.size {
			return damaged(fmt.Sprintf("file %q has a chunk at %d of %d bytes that does not fit its grid or its size %d", e.name, c.off, c.n, e.size))
		}
		cell, end = first, c.off+c.n
		e.chunks = append(e.chunks, c)
		d.content += c.n
	}
	return nil
}

func (d *decoder) finish() error {
	b := make([]byte, trailerSize)
	b[0] = kTrailer
	if _, err := io.ReadFull(d.r, b[1:]); err != nil {
		return errTrunc
	}
	t, err := parseTrailer(b)
	if err != nil {
		return err
	}
	if d.depth != 0 || d.n == 0 {
		return damaged("it ends before its top directory is closed")
	}
	if t.entries != d.n || t.files != d.files || t.bytes != d.content {
		return damaged("its trailer's counts do not match its entries")
	}
	if _, err := d.r.ReadByte(); err != io.EOF {
		return damaged("it has bytes after its trailer")
	}
	d.trailer, d.done = t, true
	return io.EOF
}

// verify checks that what was read hashes to hexd.
func (d *decoder) verify(hexd string) error {
	if fmt.Sprintf("%x", d.h.Sum(nil)) != hexd {
		return damaged("it does not match its digest")
	}
	return nil
}

var errStop = errors.New("stop")
