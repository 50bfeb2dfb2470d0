package mcp_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"connectrpc.com/connect"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/api/reins/executor/v1/executorv1connect"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/server/mcp"
)

// Sessions follow their end in a goroutine each: every one must be gone
// with its test.
func TestMain(m *testing.M) {
	http.DefaultTransport.(*http.Transport).DisableKeepAlives = true
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// fakeSandbox plays one sandbox's executor behind a fake service: the
// reins client's executor calls reach it as they reach reins serve's
// proxy. Its Download answers whatever tar the test gives it, as a
// hostile sandbox could.
type fakeSandbox struct {
	executorv1connect.UnimplementedExecutorHandler
	id       string
	tarBytes []byte
	files    map[string][]byte
	uploaded int
	statPath string // when set, the path every Stat answers (a lie)
}

func (f *fakeSandbox) check(h http.Header) error {
	if h.Get(client.SandboxHeader) != f.id {
		return errdefs.ToConnect(fmt.Errorf("sandbox %s not found: %w", h.Get(client.SandboxHeader), errdefs.ErrNotFound))
	}
	return nil
}

func (f *fakeSandbox) Stat(ctx context.Context, req *connect.Request[executorv1.StatRequest]) (*connect.Response[executorv1.StatResponse], error) {
	if err := f.check(req.Header()); err != nil {
		return nil, err
	}
	p := req.Msg.Path
	if _, ok := f.files[p]; !ok && f.tarBytes == nil {
		return nil, errdefs.ToConnect(fmt.Errorf("%s: %w", p, errdefs.ErrNotFound))
	}
	if f.statPath != "" {
		p = f.statPath
	}
	return connect.NewResponse(&executorv1.StatResponse{Info: &executorv1.FileInfo{Path: p, Name: p[strings.LastIndexByte(p, '/')+1:], Type: executorv1.FileType_FILE_TYPE_DIR}}), nil
}

func (f *fakeSandbox) Download(ctx context.Context, req *connect.Request[executorv1.DownloadRequest], stream *connect.ServerStream[executorv1.DownloadResponse]) error {
	if err := f.check(req.Header()); err != nil {
		return err
	}
	return stream.Send(&executorv1.DownloadResponse{Data: f.tarBytes})
}

func (f *fakeSandbox) WriteFile(ctx context.Context, req *connect.Request[executorv1.WriteFileRequest]) (*connect.Response[executorv1.WriteFileResponse], error) {
	if err := f.check(req.Header()); err != nil {
		return nil, err
	}
	f.files[req.Msg.Path] = req.Msg.Data
	return connect.NewResponse(&executorv1.WriteFileResponse{Size: uint64(len(req.Msg.Data))}), nil
}

// newFake serves sb's executor calls and answers a reins client of it.
func newFake(t testing.TB, sb *fakeSandbox) *client.Client {
	t.Helper()
	if sb.files == nil {
		sb.files = map[string][]byte{}
	}
	mux := http.NewServeMux()
	mux.Handle(executorv1connect.NewExecutorHandler(sb))
	// The reins client speaks HTTP/2 without TLS, as reins serve does.
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	c := client.New(srv.URL, "tok")
	t.Cleanup(c.Close)
	return c
}

// connectLocal connects an MCP client, in memory, to a server of c's.
func connectLocal(t testing.TB, c *client.Client, opts mcp.Options) *sdk.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := sdk.NewInMemoryTransports()
	ss, err := mcp.New(c, opts, nil).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(); ss.Wait() })
	return cs
}

// toolError calls a tool that must fail and answers its message.
func toolError(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) string {
	t.Helper()
	r, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return err.Error()
	}
	if !r.IsError {
		t.Fatalf("%s %v succeeded, want an error: %s", name, args, contentText(r))
	}
	return contentText(r)
}

func contentText(r *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// tarOf builds a tar stream of the headers given, with body for regular
// files.
func tarOf(t *testing.T, entries ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		body := []byte(nil)
		if h.Typeflag == tar.TypeReg {
			body = []byte("pwned\n")
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write(body)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func (f *fakeSandbox) Upload(ctx context.Context, stream *connect.ClientStream[executorv1.UploadRequest]) (*connect.Response[executorv1.UploadResponse], error) {
	if err := f.check(stream.RequestHeader()); err != nil {
		return nil, err
	}
	var n int
	for stream.Receive() {
		n += len(stream.Msg().GetData())
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	f.uploaded += n
	return connect.NewResponse(&executorv1.UploadResponse{Bytes: uint64(n)}), nil
}
