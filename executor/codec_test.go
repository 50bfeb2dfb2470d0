package executor

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
)

func TestCodecMarshalsDownloadsInPlace(t *testing.T) {
	frame := make([]byte, frameHeadroom+downloadChunk)
	for _, n := range []int{1, 127, 128, 16383, 16384, downloadChunk} {
		msg := &executorv1.DownloadResponse{}
		lend(msg, frame)
		msg.Data = frame[frameHeadroom : frameHeadroom+n]
		for i := range msg.Data {
			msg.Data[i] = byte(i)
		}
		got, err := codec{}.MarshalAppend(nil, msg)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := proto.Marshal(msg)
		if !bytes.Equal(got, want) {
			t.Errorf("%d bytes: in-place marshalling differs from proto.Marshal", n)
		}
		if &got[len(got)-1] != &frame[frameHeadroom+n-1] {
			t.Errorf("%d bytes: the message was copied", n)
		}
		unlend(msg)
		if got, _ := (codec{}).MarshalAppend(nil, msg); !bytes.Equal(got, want) {
			t.Errorf("%d bytes: the ordinary path differs", n)
		}
	}
}

func TestCodecUnmarshalsUploadsIntoPooledBuffers(t *testing.T) {
	for _, m := range []*executorv1.UploadRequest{
		{Msg: &executorv1.UploadRequest_Data{Data: bytes.Repeat([]byte("x"), 300000)}},
		{Msg: &executorv1.UploadRequest_Data{Data: bytes.Repeat([]byte("y"), 2<<20)}},
		{Msg: &executorv1.UploadRequest_Header{Header: &executorv1.UploadHeader{Dir: "/d"}}},
	} {
		b, _ := proto.Marshal(m)
		var got executorv1.UploadRequest
		if err := (codec{}).Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&got, m) {
			t.Errorf("round trip of %v differs", m.Msg)
		}
		putChunk(got.GetData())
	}
}
