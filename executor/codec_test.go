package executor

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
)

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
