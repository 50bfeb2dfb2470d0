package policy

import (
	"os"
	"runtime"
	"time"
)

func watchdog(data, input []byte) func() {
	t := time.AfterFunc(5*time.Second, func() {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		os.WriteFile("/tmp/hang.txt", append([]byte(string(data)+"\n=====\n"+string(input)+"\n=====\n"), buf[:n]...), 0o644)
	})
	return func() { t.Stop() }
}
