package executor

import (
	"fmt"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
)

// codec is Connect's binary protobuf codec, except that the data chunks of
// Upload and WriteStream land in pooled buffers instead of a fresh allocation per message.
// Under gVisor fresh memory is expensive (each new page faults into the
// sentry): allocating 100 MiB in 256 KiB pieces costs as much as writing
// them to disk. Everything else goes through package proto unchanged.
type codec struct{}

func (codec) Name() string   { return "proto" }
func (codec) IsBinary() bool { return true }

func (codec) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return proto.Marshal(pm)
}

func (codec) MarshalAppend(b []byte, m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return proto.MarshalOptions{}.MarshalAppend(b, pm)
}

func (codec) MarshalStable(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(pm)
}

func (codec) Unmarshal(b []byte, m any) error {
	if u, ok := m.(*executorv1.UploadRequest); ok {
		if data, ok := uploadData(b); ok {
			u.Msg = &executorv1.UploadRequest_Data{Data: append(getChunk(len(data)), data...)}
			return nil
		}
	}
	if u, ok := m.(*executorv1.WriteStreamRequest); ok {
		if data, ok := uploadData(b); ok { // data is field 2 there too
			u.Msg = &executorv1.WriteStreamRequest_Data{Data: append(getChunk(len(data)), data...)}
			return nil
		}
	}
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", m)
	}
	if err := proto.Unmarshal(b, pm); err != nil {
		return fmt.Errorf("unmarshal into %T: %w", m, err)
	}
	return nil
}

// uploadData returns the data of an UploadRequest encoded as exactly one
// field, data (2); anything else is left to package proto.
func uploadData(b []byte) ([]byte, bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num != 2 || typ != protowire.BytesType {
		return nil, false
	}
	v, m := protowire.ConsumeBytes(b[n:])
	if m < 0 || n+m != len(b) {
		return nil, false
	}
	return v, true
}

// maxPooledChunk is the largest buffer kept for reuse; bigger chunks (from
// other clients) are allocated.
const maxPooledChunk = 1 << 20

var chunkBufs = sync.Pool{New: func() any { b := make([]byte, 0, maxPooledChunk); return &b }}

// getChunk returns an empty buffer with room for n bytes.
func getChunk(n int) []byte {
	if n > maxPooledChunk {
		return make([]byte, 0, n)
	}
	return (*chunkBufs.Get().(*[]byte))[:0]
}

// putChunk gives back a buffer from getChunk that nothing uses any more.
func putChunk(b []byte) {
	if cap(b) == maxPooledChunk {
		b = b[:0]
		chunkBufs.Put(&b)
	}
}
