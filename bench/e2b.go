package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/reinsdev/reins/api/e2b/envd/process"
	"github.com/reinsdev/reins/api/e2b/envd/process/processconnect"
	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/server"
	"github.com/reinsdev/reins/server/e2b"
)

// e2bEndpoint: the same work through E2B's data plane (the envd
// endpoint, as the e2b SDK reaches it: HTTP/1.1, Connect's protocol,
// the sandbox named in headers), through the raw file API, and through
// reins' native Connect API, in one run: exec `true` round trips, and a
// file of mib MiB written and read back.
func (b *bench) e2bEndpoint(n, mib int) error {
	rec, err := b.m.Create(b.ctx, "", sandbox.Spec{Image: "busybox", Limits: sandbox.Limits{DiskBytes: int64(mib*4+256) << 20}}, nil)
	if err != nil {
		return err
	}
	defer b.m.Delete(b.ctx, "", rec.ID)
	api := httptest.NewUnstartedServer(server.New(server.Over(b.m), "t", nil).Handler())
	api.Config.Protocols = new(http.Protocols)
	api.Config.Protocols.SetHTTP1(true)
	api.Config.Protocols.SetUnencryptedHTTP2(true)
	api.Start()
	defer api.Close()
	envd := httptest.NewServer(e2b.New(e2b.Config{Client: func(tok string) *client.Client { return client.New(api.URL, tok) }}))
	defer envd.Close()
	sb := client.New(api.URL, "t").Sandbox(rec.ID)
	hc := &http.Client{Transport: envdHeaders{id: rec.ID, key: "t"}}
	proc := processconnect.NewProcessClient(hc, envd.URL)

	native := func() error {
		x, err := sb.Exec(b.ctx, &executorv1.ExecRequest{Argv: []string{"true"}}, nil)
		if err == nil && x.GetExitCode() != 0 {
			err = fmt.Errorf("true exited %d", x.GetExitCode())
		}
		return err
	}
	viaEnvd := func() error {
		stream, err := proc.Start(b.ctx, connect.NewRequest(&process.StartRequest{
			Process: &process.ProcessConfig{Cmd: "true"}, Stdin: proto.Bool(false)}))
		if err != nil {
			return err
		}
		defer stream.Close()
		var end *process.ProcessEvent_EndEvent
		for stream.Receive() {
			if e := stream.Msg().Event.GetEnd(); e != nil {
				end = e
			}
		}
		if err := stream.Err(); err != nil {
			return err
		}
		if end == nil || end.ExitCode != 0 {
			return fmt.Errorf("true through envd ended %v", end)
		}
		return nil
	}
	var ours, base []time.Duration
	for range 10 { // warm both paths
		if err := errors.Join(native(), viaEnvd()); err != nil {
			return err
		}
	}
	for range n { // interleaved: both see the same machine
		for _, m := range []struct {
			f  func() error
			ds *[]time.Duration
		}{{viaEnvd, &ours}, {native, &base}} {
			t0 := time.Now()
			if err := m.f(); err != nil {
				return err
			}
			*m.ds = append(*m.ds, time.Since(t0))
		}
	}
	b.add("exec `true` through the E2B endpoint, as user (p50)", ms(pct(ours, 50)), ms(pct(base, 50))+" reins' Connect API Exec, as root",
		ratio(pct(ours, 50), pct(base, 50)), "")
	return b.e2bFiles(sb, hc, envd.URL, mib)
}

// e2bFiles: a file of mib MiB written and read through E2B's /files,
// the raw file API and the native Upload/Download (tar streams).
func (b *bench) e2bFiles(sb *client.Sandbox, hc *http.Client, envdURL string, mib int) error {
	src := filepath.Join(b.dir, "e2b-payload")
	if err := writeRandom(src, int64(mib)<<20); err != nil {
		return err
	}
	defer os.Remove(src)
	want, err := fileSHA(src)
	if err != nil {
		return err
	}
	open := func() (*os.File, int64, error) {
		f, err := os.Open(src)
		if err != nil {
			return nil, 0, err
		}
		fi, err := f.Stat()
		return f, fi.Size(), err
	}
	size := float64(mib)
	rate := func(d time.Duration) string { return fmt.Sprintf("%.0f MiB/s", size/d.Seconds()) }
	timed := func(f func() error) (time.Duration, error) {
		t0 := time.Now()
		err := f()
		return time.Since(t0), err
	}
	// The best of rounds, interleaved: the machine is shared, and a
	// transfer's worst case is someone else's load.
	best := func(d *time.Duration, f func() error) func() error {
		return func() error {
			t, err := timed(f)
			if *d == 0 || t < *d {
				*d = t
			}
			return err
		}
	}
	var envdUp, rawUp, nativeUp, envdDown, rawDown, nativeDown time.Duration
	// Writes.
	envdUpOp := best(&envdUp, func() error {
		f, n, err := open()
		if err != nil {
			return err
		}
		defer f.Close()
		req, _ := http.NewRequestWithContext(b.ctx, "POST", envdURL+"/files?path=/tmp/e2b-up&username=root", f)
		req.ContentLength = n
		req.Header.Set("Content-Type", "application/octet-stream")
		return do(hc, req, io.Discard)
	})
	rawUpOp := best(&rawUp, func() error {
		f, n, err := open()
		if err != nil {
			return err
		}
		defer f.Close()
		return sb.WriteRaw(b.ctx, "/tmp/raw-up", f, n)
	})
	nativeUpOp := best(&nativeUp, func() error {
		f, n, err := open()
		if err != nil {
			return err
		}
		defer f.Close()
		pr, pw := io.Pipe()
		go func() {
			tw := tar.NewWriter(pw)
			err := tw.WriteHeader(&tar.Header{Name: "native-up", Mode: 0o644, Size: n, Typeflag: tar.TypeReg})
			if err == nil {
				_, err = io.Copy(tw, f)
			}
			if err == nil {
				err = tw.Close()
			}
			pw.CloseWithError(err)
		}()
		_, err = sb.Upload(b.ctx, "/tmp", pr)
		return err
	})
	// Reads, each checked against what was sent.
	check := func(what string, got []byte) error {
		if hex.EncodeToString(got) != want {
			return fmt.Errorf("%s read back other bytes than were written", what)
		}
		return nil
	}
	envdDownOp := best(&envdDown, func() error {
		h := sha256.New()
		req, _ := http.NewRequestWithContext(b.ctx, "GET", envdURL+"/files?path=/tmp/e2b-up&username=root", nil)
		if err := do(hc, req, h); err != nil {
			return err
		}
		return check("GET /files", h.Sum(nil))
	})
	rawDownOp := best(&rawDown, func() error {
		rc, err := sb.ReadRaw(b.ctx, "/tmp/raw-up")
		if err != nil {
			return err
		}
		defer rc.Close()
		h := sha256.New()
		if _, err := io.Copy(h, rc); err != nil {
			return err
		}
		return check("ReadRaw", h.Sum(nil))
	})
	nativeDownOp := best(&nativeDown, func() error {
		h := sha256.New()
		pr, pw := io.Pipe()
		go func() {
			_, err := sb.Download(b.ctx, "/tmp/native-up", pw)
			pw.CloseWithError(err)
		}()
		tr := tar.NewReader(pr)
		if _, err := tr.Next(); err != nil {
			return err
		}
		if _, err := io.Copy(h, tr); err != nil {
			return err
		}
		io.Copy(io.Discard, pr)
		return check("Download", h.Sum(nil))
	})
	for range 3 {
		for i, op := range []func() error{envdUpOp, rawUpOp, nativeUpOp, envdDownOp, rawDownOp, nativeDownOp} {
			if err := op(); err != nil {
				return fmt.Errorf("%s: %w", []string{"POST /files", "WriteRaw", "Upload", "GET /files", "ReadRaw", "Download"}[i], err)
			}
		}
	}
	what := fmt.Sprintf("%d MiB file (best of 3)", mib)
	b.add(what+" written through the E2B endpoint (POST /files)", rate(envdUp), rate(nativeUp)+" native Upload (tar)", ratio(nativeUp, envdUp), "")
	b.add(what+" written through the raw file API (PUT)", rate(rawUp), rate(nativeUp)+" native Upload (tar)", ratio(nativeUp, rawUp), "")
	b.add(what+" read through the E2B endpoint (GET /files)", rate(envdDown), rate(nativeDown)+" native Download (tar)", ratio(nativeDown, envdDown), "")
	b.add(what+" read through the raw file API (GET)", rate(rawDown), rate(nativeDown)+" native Download (tar)", ratio(nativeDown, rawDown), "")
	return nil
}

// do sends req and copies a 2xx answer's body to w.
func do(hc *http.Client, req *http.Request, w io.Writer) error {
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(body))
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// envdHeaders names the sandbox and the key on every request, as the SDK
// does with E2B_SANDBOX_URL.
type envdHeaders struct{ id, key string }

func (h envdHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(e2b.SandboxIDHeader, h.id)
	r.Header.Set(e2b.APIKeyHeader, h.key)
	return http.DefaultTransport.RoundTrip(r)
}
