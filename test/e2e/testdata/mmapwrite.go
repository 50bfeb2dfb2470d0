//go:build ignore

// mmapwrite makes the file os.Args[1] of 4096 'a's, then writes 'b's over
// it through a shared mapping and waits, without msync or munmap: what
// the sandbox's own reads see, the file holds, though no write(2) put it
// there.
package main

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"time"
)

func main() {
	f, err := os.Create(os.Args[1])
	if err != nil {
		panic(err)
	}
	if _, err := f.Write(bytes.Repeat([]byte("a"), 4096)); err != nil {
		panic(err)
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		panic(err)
	}
	copy(m, bytes.Repeat([]byte("b"), 4096))
	fmt.Println("written")
	time.Sleep(time.Minute)
}
