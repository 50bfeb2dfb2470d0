package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
)

// asyncHash computes a transfer's sha256 on a goroutine of its own, so that
// hashing a chunk overlaps with the syscall that moves it (the socket write
// of a download, the file write of an upload): under gVisor those are slow,
// and hashing is a third of the rest.
//
// The owner hands it one chunk at a time with start, and must not change
// the chunk before wait returns.
type asyncHash struct {
	h    hash.Hash
	req  chan []byte
	done chan struct{}
	busy bool
}

func newAsyncHash() *asyncHash {
	a := &asyncHash{h: sha256.New(), req: make(chan []byte), done: make(chan struct{})}
	go a.loop()
	return a
}

func (a *asyncHash) loop() {
	for b := range a.req {
		a.h.Write(b)
		a.done <- struct{}{}
	}
}

// start hashes b, after the chunks before it.
func (a *asyncHash) start(b []byte) {
	a.wait()
	if len(b) > 0 {
		a.req <- b
		a.busy = true
	}
}

// wait returns once the chunk given last is hashed.
func (a *asyncHash) wait() {
	if a.busy {
		<-a.done
		a.busy = false
	}
}

// sum returns the hex sha256 of everything given so far.
func (a *asyncHash) sum() string {
	a.wait()
	return hex.EncodeToString(a.h.Sum(nil))
}

// close ends the goroutine; call it once, last.
func (a *asyncHash) close() {
	a.wait()
	close(a.req)
}
