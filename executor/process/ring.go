package process

// ring keeps the last max bytes written to one output stream. Positions are
// offsets in everything ever written (total), so a reader that fell behind
// learns exactly how many bytes it lost.
//
// The buffer grows as output arrives (a process that prints one line costs a
// few KiB, not max); until it first fills, the data is linear at [0,total),
// which is also where the wrapped indexing (pos % len) puts it.
type ring struct {
	buf   []byte
	max   int
	total uint64
}

const minRing = 4 << 10

func (r *ring) write(b []byte) {
	if len(b) >= r.max {
		r.total += uint64(len(b) - r.max)
		b = b[len(b)-r.max:]
	}
	if need := r.total + uint64(len(b)); len(r.buf) < r.max && need > uint64(len(r.buf)) {
		// Still linear (nothing was ever dropped): grow, keeping [0,total).
		size := min(r.max, max(2*len(r.buf), int(min(need, uint64(r.max))), minRing))
		nb := make([]byte, size)
		copy(nb, r.buf)
		r.buf = nb
	}
	size := uint64(len(r.buf))
	at := r.total % size
	n := copy(r.buf[at:], b)
	copy(r.buf, b[n:])
	r.total += uint64(len(b))
}

// start is the position of the oldest byte still held.
func (r *ring) start() uint64 {
	held := min(r.total, uint64(len(r.buf)))
	return r.total - held
}

// read copies bytes from *pos into dst, advancing *pos. dropped is how many
// bytes from *pos on were lost before they could be read.
func (r *ring) read(pos *uint64, dst []byte) (n int, dropped uint64) {
	if s := r.start(); *pos < s {
		dropped = s - *pos
		*pos = s
	}
	avail := r.total - *pos
	if avail == 0 {
		return 0, dropped
	}
	size := uint64(len(r.buf))
	at := *pos % size
	want := min(uint64(len(dst)), avail)
	n = copy(dst[:want], r.buf[at:])
	if uint64(n) < want {
		n += copy(dst[n:want], r.buf)
	}
	*pos += uint64(n)
	return n, dropped
}

// release frees the buffer; the count of bytes written stays, so later
// readers are told everything was dropped.
func (r *ring) release() int {
	n := len(r.buf)
	r.buf = nil
	return n
}
