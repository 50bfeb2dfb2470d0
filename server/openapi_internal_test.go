package server

import (
	"encoding/json"
	"testing"

	"github.com/reinsdev/reins/api"
	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/api/reins/executor/v1/executorv1connect"
)

// TestOpenAPIExecutorCalls: the executor calls the OpenAPI document
// describes are those the service answers in JSON itself: the unary ones
// of executorJSON, and the streams it relays message by message (Exec,
// Attach, Download, in wire.JSON too). The rest are proxied as bytes,
// which a JSON caller cannot use, and are left out of the document.
func TestOpenAPIExecutorCalls(t *testing.T) {
	var doc struct {
		Paths map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	answered := (&Server{}).executorJSON()
	for _, p := range []string{executorv1connect.ExecutorExecProcedure, executorv1connect.ExecutorAttachProcedure, executorv1connect.ExecutorDownloadProcedure} {
		answered[p] = nil
	}
	methods := executorv1.File_reins_executor_v1_executor_proto.Services().ByName("Executor").Methods()
	for i := 0; i < methods.Len(); i++ {
		p := "/reins.executor.v1.Executor/" + string(methods.Get(i).Name())
		_, inJSON := answered[p]
		if _, described := doc.Paths[p]; described != inJSON {
			t.Errorf("%s: described %v, answered in JSON %v: change internal/openapi's binaryOnly or the service", p, described, inJSON)
		}
	}
}
