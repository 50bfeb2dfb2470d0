// Command reins-shim is the process that stays with each sandbox of the
// gvisor and runc backends for its whole life (see sandbox/oci: the shim).
// reins serve starts it instead of re-executing its own large binary: a
// small program starts faster, and starting one is on every create's path.
// It is not a command to run by hand.
package main

import (
	"fmt"
	"os"

	"github.com/reinsdev/reins/sandbox/oci"
)

func main() {
	oci.MaybeRunShim()
	fmt.Fprintln(os.Stderr, "reins-shim: reins serve starts this for each sandbox; it is not a command to run by hand")
	os.Exit(2)
}
