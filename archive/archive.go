// Package archive writes tar streams of files and directories and extracts
// them safely.
//
// Extraction is meant for streams that come from someone we do not trust (a
// sandbox sending files to the host, or a client sending files into a
// sandbox). Every entry is written through an os.Root opened on the
// destination, so no entry can land outside it: names with ".." or a leading
// "/" are refused, and so is any entry that would be written through a
// symbolic link pointing outside. Device nodes and fifos are refused,
// set-user-ID and set-group-ID bits are dropped and ownership is not restored
// (like tar --no-same-owner). Errors name the offending entry.
//
// Both directions stream: memory use does not grow with the size of the
// files, and copy buffers are pooled.
package archive

import (
	"io"
	"sync"
)

// bufSize is the copy buffer size; large buffers mean few syscalls, which
// matters under gVisor where each one is expensive.
const bufSize = 256 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, bufSize); return &b }}

func getBuf() *[]byte  { return bufPool.Get().(*[]byte) }
func putBuf(b *[]byte) { bufPool.Put(b) }

// onlyReader and onlyWriter hide ReadFrom/WriteTo so that io.CopyBuffer uses
// our pooled buffer instead of allocating its own (os.File's fallbacks do).
type onlyReader struct{ io.Reader }
type onlyWriter struct{ io.Writer }
