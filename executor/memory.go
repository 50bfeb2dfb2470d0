package executor

import (
	"runtime/debug"
	"sync"
	"time"
)

// bigTransfer is the size past which a transfer has grown the heap enough
// to be worth giving back once things are quiet.
const bigTransfer = 16 << 20

// settleDelay is how long after the last big transfer the memory it used is
// returned to the system: long enough that back-to-back transfers reuse it
// (fresh memory is expensive under gVisor), short enough that an idle
// sandbox is small.
const settleDelay = 2 * time.Second

// settler returns memory to the system after big transfers, once none is
// running: the executor idles at a small RSS without paying for it on
// every transfer.
type settler struct {
	mu     sync.Mutex
	active int
	timer  *time.Timer
}

// begin marks a transfer as running.
func (m *settler) begin() {
	m.mu.Lock()
	m.active++
	if m.timer != nil {
		m.timer.Stop()
	}
	m.mu.Unlock()
}

// end marks a transfer of n bytes as done.
func (m *settler) end(n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.active--
	if n < bigTransfer || m.active > 0 {
		return
	}
	if m.timer == nil {
		m.timer = time.AfterFunc(settleDelay, m.settle)
	} else {
		m.timer.Reset(settleDelay)
	}
}

func (m *settler) settle() {
	m.mu.Lock()
	idle := m.active == 0
	m.mu.Unlock()
	if idle {
		debug.FreeOSMemory()
	}
}

func (m *settler) stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.timer != nil {
		m.timer.Stop()
	}
}
