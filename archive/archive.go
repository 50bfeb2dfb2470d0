// Package archive writes tar streams of files and directories and extracts
// them safely. It holds reins's one tar extractor: sandbox cp (the executor
// unpacking an upload inside a sandbox, the CLI unpacking a download from a
// sandbox onto the user's machine) and image layers (package image, with
// Options.Layer and overlayfs whiteouts) all unpack through it.
//
// Extraction is meant for streams that come from someone we do not trust.
// Every entry is written beneath the destination, reached one component at
// a time from a descriptor of it, never following a symbolic link (see
// dirs.go): names with ".." or a leading "/" are refused, and so is any
// entry beneath a symbolic link, whether the archive made the link or it
// was there before (a layer may follow its own links that stay inside it).
// Hard links may only point at what an earlier entry made. Device nodes,
// fifos and other special types are refused, whatever the mode; set-user-ID
// and set-group-ID bits are dropped and ownership is not restored (like tar
// --no-same-owner), except for layers. Names past PATH_MAX or NAME_MAX, more
// entries than Options.MaxEntries and more content than Options.MaxBytes
// are refused before anything is written for them. Errors name the
// offending entry.
//
// What a refused archive leaves: the entries before the refused one, each
// whole (a file that fails midway is removed). Nothing that was in the
// destination before is lost except a file, link or symbolic link that an
// entry of the same name replaced (cp overwrites files, as tar does, by
// unlinking first, so never through a hard link); a directory is never
// replaced by something else, nor something else by a directory, and a
// directory already there keeps its mode and times. Image layers go to a
// new temporary directory renamed into place only on success.
//
// Both directions stream: memory use does not grow with the size of the
// files (it grows by a few bytes per entry, for hard links and directory
// times), and copy buffers are pooled.
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
