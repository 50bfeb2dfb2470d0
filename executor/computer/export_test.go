package computer

import "syscall"

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
