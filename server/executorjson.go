package server

import (
	"context"
	"mime"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/api/reins/executor/v1/executorv1connect"
	"github.com/reinsdev/reins/errdefs"
)

// The executor speaks binary protobuf only, and the service passes its
// calls through as bytes (the proxy, server.go). A caller in JSON (curl,
// an SDK without protobuf) is served here instead: the service reads the
// JSON request (bounded by MaxMessage, as every request), calls the
// executor in protobuf, and answers in the API's one JSON form
// (wire.JSON). Only unary calls: the streaming ones have their own ways
// for such callers (RunCommand for Exec, the raw file routes for
// Download, Upload, ReadStream and WriteStream).

// executorJSON returns the handlers of the executor's unary calls for
// JSON callers, by procedure.
func (s *Server) executorJSON() map[string]http.Handler {
	m := map[string]http.Handler{
		executorv1connect.ExecutorHelloProcedure:         jsonUnary[executorv1.HelloRequest, executorv1.HelloResponse](s, executorv1connect.ExecutorHelloProcedure, nil),
		executorv1connect.ExecutorHealthProcedure:        jsonUnary[executorv1.HealthRequest, executorv1.HealthResponse](s, executorv1connect.ExecutorHealthProcedure, nil),
		executorv1connect.ExecutorUsageProcedure:         jsonUnary[executorv1.UsageRequest, executorv1.UsageResponse](s, executorv1connect.ExecutorUsageProcedure, nil),
		executorv1connect.ExecutorWriteStdinProcedure:    jsonUnary[executorv1.WriteStdinRequest, executorv1.WriteStdinResponse](s, executorv1connect.ExecutorWriteStdinProcedure, nil),
		executorv1connect.ExecutorResizePTYProcedure:     jsonUnary[executorv1.ResizePTYRequest, executorv1.ResizePTYResponse](s, executorv1connect.ExecutorResizePTYProcedure, nil),
		executorv1connect.ExecutorSignalProcedure:        jsonUnary[executorv1.SignalRequest, executorv1.SignalResponse](s, executorv1connect.ExecutorSignalProcedure, nil),
		executorv1connect.ExecutorListProcessesProcedure: jsonUnary[executorv1.ListProcessesRequest, executorv1.ListProcessesResponse](s, executorv1connect.ExecutorListProcessesProcedure, nil),
		executorv1connect.ExecutorStatProcedure:          jsonUnary[executorv1.StatRequest, executorv1.StatResponse](s, executorv1connect.ExecutorStatProcedure, nil),
		executorv1connect.ExecutorListDirProcedure:       jsonUnary[executorv1.ListDirRequest, executorv1.ListDirResponse](s, executorv1connect.ExecutorListDirProcedure, nil),
		executorv1connect.ExecutorReadFileProcedure:      jsonUnary[executorv1.ReadFileRequest, executorv1.ReadFileResponse](s, executorv1connect.ExecutorReadFileProcedure, nil),
		executorv1connect.ExecutorReadLinesProcedure:     jsonUnary[executorv1.ReadLinesRequest, executorv1.ReadLinesResponse](s, executorv1connect.ExecutorReadLinesProcedure, linesAsText),
		executorv1connect.ExecutorWriteFileProcedure:     jsonUnary[executorv1.WriteFileRequest, executorv1.WriteFileResponse](s, executorv1connect.ExecutorWriteFileProcedure, nil),
		executorv1connect.ExecutorEditFileProcedure:      jsonUnary[executorv1.EditFileRequest, executorv1.EditFileResponse](s, executorv1connect.ExecutorEditFileProcedure, nil),
		executorv1connect.ExecutorMakeDirProcedure:       jsonUnary[executorv1.MakeDirRequest, executorv1.MakeDirResponse](s, executorv1connect.ExecutorMakeDirProcedure, nil),
		executorv1connect.ExecutorRemoveProcedure:        jsonUnary[executorv1.RemoveRequest, executorv1.RemoveResponse](s, executorv1connect.ExecutorRemoveProcedure, nil),
		executorv1connect.ExecutorMoveProcedure:          jsonUnary[executorv1.MoveRequest, executorv1.MoveResponse](s, executorv1connect.ExecutorMoveProcedure, nil),
		executorv1connect.ExecutorGlobProcedure:          jsonUnary[executorv1.GlobRequest, executorv1.GlobResponse](s, executorv1connect.ExecutorGlobProcedure, nil),
		executorv1connect.ExecutorGrepProcedure:          jsonUnary[executorv1.GrepRequest, executorv1.GrepResponse](s, executorv1connect.ExecutorGrepProcedure, nil),
		executorv1connect.ExecutorComputerProcedure:      jsonUnary[executorv1.ComputerRequest, executorv1.ComputerResponse](s, executorv1connect.ExecutorComputerProcedure, nil),
	}
	for p, h := range m {
		m[p] = s.withExecutor(h)
	}
	return m
}

// linesAsText fills each line's text_utf8 for a JSON caller, who would
// otherwise read base64.
func linesAsText(r *executorv1.ReadLinesResponse) {
	for _, l := range r.Lines {
		l.TextUtf8 = strings.ToValidUTF8(string(l.Text), "\uFFFD")
	}
}

// jsonUnary serves procedure to JSON callers by calling it on the
// executor in protobuf; post, if set, adds to the answer.
func jsonUnary[Req, Res any](s *Server, procedure string, post func(*Res)) http.Handler {
	return connect.NewUnaryHandler(procedure, func(ctx context.Context, req *connect.Request[Req]) (*connect.Response[Res], error) {
		id, ex := s.executor(ctx)
		c := connect.NewClient[Req, Res](&http.Client{Transport: ex.Transport(procedure)}, executorURL.String()+procedure,
			connect.WithInterceptors(bearerToken(ex.Token())), connect.WithReadMaxBytes(MaxMessage+1<<20))
		resp, err := c.CallUnary(ctx, connect.NewRequest(req.Msg))
		if err != nil {
			// As a kinded error: the executor's answer keeps its kind and
			// words; a broken socket is explained by the sandbox's fate.
			err = errdefs.FromConnect(err)
			if errdefs.Kind(err) == errdefs.ErrUnavailable {
				return nil, s.executorDown(id, err)
			}
			return nil, s.callEnded(ctx, id, err)
		}
		if post != nil {
			post(resp.Msg)
		}
		return connect.NewResponse(resp.Msg), nil
	}, s.apiOptions()...)
}

// bearerToken adds the executor's token to a call.
type bearerToken string

func (t bearerToken) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(t))
		return next(ctx, req)
	}
}

func (t bearerToken) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (t bearerToken) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// isJSON reports a request whose body is JSON (Connect's unary JSON).
func isJSON(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "application/json"
}
