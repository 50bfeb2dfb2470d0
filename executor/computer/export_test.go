package computer

import (
	"syscall"
	"time"

	"github.com/jezek/xgb/xproto"
)

// KillServer kills the X server (SIGKILL) and waits until it is reaped, as
// if it had crashed.
func (d *Display) KillServer() {
	d.mu.Lock()
	p := d.x.proc
	d.mu.Unlock()
	p.Signal(syscall.SIGKILL)
	<-p.Done()
}

// SetMaxPNG lowers the PNG limit for a test; it returns the old one.
func SetMaxPNG(n int) int {
	old := maxPNG
	maxPNG = n
	return old
}

// SpareKeys is how many keycodes the keyboard mapping leaves empty.
func (d *Display) SpareKeys() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	km, err := d.x.readKeymap()
	if err != nil {
		return -1
	}
	return len(km.spare)
}

// ServerPid is the X server's process id.
func (d *Display) ServerPid() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.x.proc.Pid()
}

// ResourceBase is the base of the display's X connection's resource ids,
// which names its connection to KillClient.
func (d *Display) ResourceBase() uint32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return xproto.Setup(d.x.conn).ResourceIdBase
}

// DropConnection closes the display's X connection under it, as if the
// server had closed it.
func (d *Display) DropConnection() {
	d.mu.Lock()
	x := d.x
	d.mu.Unlock()
	x.conn.Close()
	<-x.lost
}

// SetMaxCall lowers the bound of one call for a test; it returns the old.
func SetMaxCall(d time.Duration) time.Duration {
	old := maxCall
	maxCall = d
	return old
}
