package client

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
)

// chunkSize is the size of upload messages: large enough that per-message
// costs vanish, small enough to stay far below message limits.
const chunkSize = 256 << 10

// Upload sends a tar stream to be unpacked under dir in the sandbox.
func (s *Sandbox) Upload(ctx context.Context, dir string, tarStream io.Reader) (*executorv1.UploadResponse, error) {
	stream := s.rpc.Upload(ctx)
	if err := stream.Send(&executorv1.UploadRequest{Msg: &executorv1.UploadRequest_Header{Header: &executorv1.UploadHeader{Dir: dir}}}); err != nil {
		_, cerr := stream.CloseAndReceive()
		return nil, s.c.wrap(errors.Join(err, cerr))
	}
	buf := make([]byte, chunkSize)
	for {
		n, rerr := io.ReadFull(tarStream, buf)
		if n > 0 {
			if err := stream.Send(&executorv1.UploadRequest{Msg: &executorv1.UploadRequest_Data{Data: buf[:n]}}); err != nil {
				// The server ended the call; its answer says why.
				_, cerr := stream.CloseAndReceive()
				if cerr != nil {
					return nil, s.c.wrap(cerr)
				}
				return nil, s.c.wrap(err)
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			stream.CloseAndReceive()
			return nil, rerr
		}
	}
	resp, err := stream.CloseAndReceive()
	if err != nil {
		return nil, s.c.wrap(err)
	}
	return resp.Msg, nil
}

// Download writes a tar stream of path (a file or directory) to w and
// returns the sha256 the executor computed over it.
func (s *Sandbox) Download(ctx context.Context, p string, w io.Writer) (string, error) {
	stream, err := s.rpc.Download(ctx, connectRequest(&executorv1.DownloadRequest{Path: p}))
	if err != nil {
		return "", s.c.wrap(err)
	}
	defer stream.Close()
	var sum string
	for stream.Receive() {
		m := stream.Msg()
		if len(m.Data) > 0 {
			if _, err := w.Write(m.Data); err != nil {
				return "", err
			}
		}
		if m.Sha256 != "" {
			sum = m.Sha256
		}
	}
	if err := stream.Err(); err != nil {
		return "", s.c.wrap(err)
	}
	return sum, nil
}

// CopyName is the name a copy out of a sandbox is made under: the last
// element of the path the user asked for, so that a sandbox cannot choose
// which local file is written. Only a path with no name of its own (".",
// "..", "/") takes the name of the path the sandbox resolved it to,
// "root" when that has none either.
func CopyName(asked, resolved string) string {
	for _, p := range []string{asked, resolved} {
		switch base := path.Base(path.Clean(p)); base {
		case ".", "..", "/":
		default:
			return base
		}
	}
	return "root"
}

// RenameTar copies a tar stream, renaming its top entry from to to: an entry
// named from, or under from/, is renamed; other entries are dropped. It is
// how cp gives a copied file or directory a new name.
func RenameTar(r io.Reader, w io.Writer, from, to string) error {
	tr := tar.NewReader(r)
	tw := tar.NewWriter(w)
	from, to = strings.Trim(path.Clean(from), "/"), strings.Trim(path.Clean(to), "/")
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return tw.Close()
		}
		if err != nil {
			return fmt.Errorf("reading tar stream: %w", err)
		}
		name := strings.TrimPrefix(path.Clean(h.Name), "./")
		switch {
		case name == from:
			h.Name = to
		case strings.HasPrefix(name, from+"/"):
			h.Name = to + name[len(from):]
		default:
			continue
		}
		if h.Typeflag == tar.TypeDir && !strings.HasSuffix(h.Name, "/") {
			h.Name += "/"
		}
		if h.Typeflag == tar.TypeLink {
			ln := strings.TrimPrefix(path.Clean(h.Linkname), "./")
			if ln == from || strings.HasPrefix(ln, from+"/") {
				h.Linkname = to + ln[len(from):]
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}
