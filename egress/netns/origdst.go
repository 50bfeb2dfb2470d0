package netns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// soOriginalDst is SO_ORIGINAL_DST (linux/netfilter_ipv4.h), at level
// SOL_IP.
const soOriginalDst = 80

// OriginalDst returns where a connection that the firewall redirected to
// Ports.Transparent was going: the address and port the sandbox asked
// for. c must be a *net.TCPConn accepted from a Router.Listen listener.
func OriginalDst(c net.Conn) (netip.AddrPort, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("original destination: %T is not a TCP connection", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var sa unix.RawSockaddrInet4
	var serr error
	err = raw.Control(func(fd uintptr) {
		n := uint32(unsafe.Sizeof(sa))
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_IP, soOriginalDst,
			uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&n)), 0)
		if errno != 0 {
			serr = errno
		}
	})
	if err = errors.Join(err, serr); err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination (SO_ORIGINAL_DST): %w", err)
	}
	port := uint16(sa.Port>>8) | uint16(sa.Port<<8) // network order
	return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port), nil
}
