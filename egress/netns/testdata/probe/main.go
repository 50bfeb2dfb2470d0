// Command probe tries network connections from inside a sandbox and
// prints one line per probe, so that a test can tell what was tried from
// what arrived:
//
//	probe tcp=ADDR:PORT udp=ADDR:PORT icmp=ADDR tcp6=[ADDR]:PORT ...
//	probe send=ADDR:PORT/MiB    write MiB mebibytes of zeros, 64 KiB at a time
//
// prints "KIND TARGET sent" or "KIND TARGET sent reply=..." or
// "KIND TARGET error: ...". Each message it sends names its target.
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
)

func main() {
	for _, arg := range os.Args[1:] {
		kind, target, _ := strings.Cut(arg, "=")
		fmt.Println(kind, target, probe(kind, target))
	}
}

func probe(kind, target string) string {
	msg := "probe " + kind + " " + target + "\n"
	switch kind {
	case "tcp", "tcp6":
		c, err := net.DialTimeout(kind, target, 2*time.Second)
		if err != nil {
			return "error: " + err.Error()
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte(msg)); err != nil {
			return "error: " + err.Error()
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return "sent error: " + err.Error()
		}
		return "sent reply=" + strings.TrimSpace(line)
	case "udp", "udp6":
		c, err := net.Dial(kind, target)
		if err != nil {
			return "error: " + err.Error()
		}
		defer c.Close()
		if _, err := c.Write([]byte(msg)); err != nil {
			return "error: " + err.Error()
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		if err != nil {
			return "sent"
		}
		return "sent reply=" + strings.TrimSpace(string(buf[:n]))
	case "icmp":
		return ping(target)
	case "send":
		addr, mib, _ := strings.Cut(target, "/")
		var n int
		fmt.Sscan(mib, &n)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return "error: " + err.Error()
		}
		defer c.Close()
		buf := make([]byte, 64<<10)
		for i := 0; i < n*16; i++ {
			if _, err := c.Write(buf); err != nil {
				return "error: " + err.Error()
			}
		}
		return "sent"
	}
	return "error: unknown probe"
}

// ping sends one ICMP echo request from a ping socket (SOCK_DGRAM,
// IPPROTO_ICMP: no CAP_NET_RAW needed where ping_group_range allows).
func ping(target string) string {
	ip := net.ParseIP(target).To4()
	if ip == nil {
		return "error: not an IPv4 address"
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM, syscall.IPPROTO_ICMP)
	if err != nil {
		return "error: " + err.Error()
	}
	defer syscall.Close(fd)
	pkt := []byte{8, 0, 0, 0, 0x12, 0x34, 0, 1, 'r', 'e', 'i', 'n', 's'}
	sum := 0
	for i := 0; i+1 < len(pkt); i += 2 {
		sum += int(pkt[i])<<8 | int(pkt[i+1])
	}
	sum += int(pkt[len(pkt)-1]) << 8
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	pkt[2], pkt[3] = byte(^sum>>8), byte(^sum)
	var sa syscall.SockaddrInet4
	copy(sa.Addr[:], ip)
	if err := syscall.Sendto(fd, pkt, 0, &sa); err != nil {
		return "error: " + err.Error()
	}
	tv := syscall.Timeval{Sec: 1}
	syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	buf := make([]byte, 512)
	if n, _, err := syscall.Recvfrom(fd, buf, 0); err == nil && n > 0 {
		return "sent reply=echo"
	}
	return "sent"
}
