package image

import (
	"context"
	"sync"
)

// keyedMutex serializes work on one key (a layer digest, a reference) while
// leaving other keys free. Waiting honours the context.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	ch   chan struct{} // holds one token while the key is locked
	refs int           // holders and waiters
}

// lock blocks until key is free or ctx is done; on success the caller must
// call the returned unlock exactly once.
func (k *keyedMutex) lock(ctx context.Context, key string) (unlock func(), err error) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = make(map[string]*keyLock)
	}
	l := k.locks[key]
	if l == nil {
		l = &keyLock{ch: make(chan struct{}, 1)}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()

	release := func() {
		k.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			<-l.ch
			release()
		})
	}, nil
}

// pinSet counts the layers and images a Resolve in this process is using,
// so that Prune leaves them alone.
type pinSet struct {
	mu   sync.Mutex
	pins map[string]int
}

func (p *pinSet) pin(keys ...string) (unpin func()) {
	p.mu.Lock()
	if p.pins == nil {
		p.pins = make(map[string]int)
	}
	for _, k := range keys {
		p.pins[k]++
	}
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			for _, k := range keys {
				if p.pins[k]--; p.pins[k] <= 0 {
					delete(p.pins, k)
				}
			}
			p.mu.Unlock()
		})
	}
}

// ifUnpinned runs f while holding the pin lock if key is not pinned, and
// reports whether it ran. f must be quick (a rename).
func (p *pinSet) ifUnpinned(key string, f func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pins[key] > 0 {
		return false
	}
	f()
	return true
}
