package process

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestRing checks the ring buffer against a plain record of everything
// written: a reader gets the last max bytes, and is told exactly how many
// it missed.
func TestRing(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{1, 7, 4096, 10000} {
		r := ring{max: size}
		var all []byte
		var pos uint64
		for range 500 {
			n := rng.IntN(3*size/2 + 2)
			chunk := make([]byte, n)
			for i := range chunk {
				chunk[i] = byte(rng.Uint32())
			}
			r.write(chunk)
			all = append(all, chunk...)
			if len(r.buf) > size {
				t.Fatalf("max %d: buffer grew to %d", size, len(r.buf))
			}
			if rng.IntN(3) > 0 {
				continue // let the reader fall behind sometimes
			}
			dst := make([]byte, rng.IntN(2*size)+1)
			for {
				before := pos
				n, dropped := r.read(&pos, dst)
				wantStart := uint64(max(0, len(all)-size))
				if before < wantStart && dropped != wantStart-before {
					t.Fatalf("max %d: dropped %d, want %d", size, dropped, wantStart-before)
				}
				if !bytes.Equal(dst[:n], all[pos-uint64(n):pos]) {
					t.Fatalf("max %d: read %d bytes that differ from what was written", size, n)
				}
				if n == 0 {
					break
				}
			}
			if pos != uint64(len(all)) {
				t.Fatalf("max %d: reader at %d, %d written", size, pos, len(all))
			}
		}
		freed := r.release()
		if freed == 0 && len(all) > 0 {
			t.Errorf("max %d: release freed nothing", size)
		}
		if n, dropped := r.read(new(uint64), make([]byte, 10)); n != 0 || dropped != uint64(len(all)) {
			t.Errorf("after release: read %d, dropped %d; want 0 and %d", n, dropped, len(all))
		}
	}
}

func TestRingGrowsOnDemand(t *testing.T) {
	r := ring{max: 1 << 20}
	r.write([]byte("hello\n"))
	if len(r.buf) > minRing {
		t.Errorf("one line took a %d-byte buffer", len(r.buf))
	}
}
