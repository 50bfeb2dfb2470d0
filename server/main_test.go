package server

import (
	"fmt"
	"net/http"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a handler starts (streams, proxied executor calls) must
// end with its test. The tests' clients keep no idle connections (the
// reins client clones the default transport): a connection pool is a
// cache, not a leak. net/http lingers 500ms before closing a connection
// whose request body went unread: a sleep, not a leak either.
func TestMain(m *testing.M) {
	http.DefaultTransport.(*http.Transport).DisableKeepAlives = true
	code := m.Run()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	if code == 0 {
		// A keep-alive connection of a client transport shows up after
		// the tests' cleanups (its owner not found yet); it is a client's
		// pool, not a handler's goroutine, which is what this guards.
		err := goleak.Find(goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
