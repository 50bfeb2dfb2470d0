package files

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"syscall"
)

// Line is one line of a text file, without its newline; Cut says it was
// longer than the caller's limit and cut there.
type Line struct {
	Text []byte
	Cut  bool
}

// Lines limits.
const (
	DefaultLines     = 2000
	MaxLines         = 100000
	DefaultLineBytes = 2000
	MaxLineBytes     = 1 << 20
)

// ReadLines returns at most count lines of the text file p from line first
// (1-based), each cut at lineBytes (at most 1 MiB), fewer when they add
// up to MaxRead, and counts all of the file's lines,
// reading it through once in the sandbox however large it is: only the
// lines asked for leave the executor. A file with a NUL in its first 8000
// bytes is binary: no lines, binary true.
func (f *FS) ReadLines(p string, first uint64, count, lineBytes int) (lines []Line, total, size uint64, binary bool, err error) {
	name, abs, err := f.resolve(p)
	if err != nil {
		return nil, 0, 0, false, err
	}
	if first == 0 {
		first = 1
	}
	if count <= 0 {
		count = DefaultLines
	}
	count = min(count, MaxLines)
	if lineBytes <= 0 {
		lineBytes = DefaultLineBytes
	}
	lineBytes = min(lineBytes, MaxLineBytes)
	file, err := f.tree.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, 0, false, pathError(abs, err)
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		return nil, 0, 0, false, pathError(abs, err)
	}
	switch {
	case fi.IsDir():
		return nil, 0, 0, false, isDirectory("%s is a directory; use ListDir", abs)
	case !fi.Mode().IsRegular():
		return nil, 0, 0, false, invalid("%s is not a regular file (a device, fifo or socket); only regular files can be read", abs)
	}
	r := bufio.NewReaderSize(file, 256<<10)
	if head, _ := r.Peek(binaryProbe); bytes.IndexByte(head, 0) >= 0 {
		return nil, 0, uint64(fi.Size()), true, nil
	}
	var n uint64 // lines seen
	var cur []byte
	kept := 0 // bytes of the lines kept: an answer holds at most MaxRead
	cut := false
	for {
		chunk, err := r.ReadSlice('\n')
		if len(chunk) > 0 {
			want := n+1 >= first && n+1 < first+uint64(count) && kept < MaxRead
			if want && !cut {
				room := lineBytes - len(cur)
				if len(chunk) > room {
					cur, cut = append(cur, chunk[:room]...), true
				} else {
					cur = append(cur, chunk...)
				}
			}
			if chunk[len(chunk)-1] == '\n' || err == io.EOF {
				n++
				if want {
					text := bytes.TrimSuffix(cur, []byte{'\n'})
					lines = append(lines, Line{Text: bytes.Clone(text), Cut: cut})
					kept += len(text)
				}
				cur, cut = cur[:0], false
			}
		}
		switch {
		case err == nil || errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF:
			return lines, n, uint64(fi.Size()), false, nil
		default:
			return nil, 0, 0, false, pathError(abs, err)
		}
	}
}
