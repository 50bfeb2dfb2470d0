package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	reinsclient "github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor/client"
)

// stagingClient dials sandbox id's executor the way the service does: with
// the host's view of its root filesystem, so single files move through the
// staging directory (docs/decisions/0017-staged-transfers.md).
func stagingClient(t *testing.T, s *service, id string) (*client.Client, string) {
	t.Helper()
	dir := filepath.Join(s.dataDir, "sandboxes", id)
	data, err := os.ReadFile(filepath.Join(dir, "sandbox.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct{ Token string }
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	rootfs := filepath.Join(dir, "rootfs")
	c, err := client.Dial(context.Background(), filepath.Join(dir, "run", "executor.sock"), rec.Token,
		client.WithCallTimeout(20*time.Second), client.WithHostRoot(rootfs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, rootfs
}

// TestStagedTransfers: files written inside the sandbox come out whole
// through the host's view of its disk, and files the host stages arrive
// whole as the sandbox sees them (gVisor's caches do not hide either).
func TestStagedTransfers(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			s := startService(t)
			sb := s.create("--backend", backend)
			c, _ := stagingClient(t, s, sb)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			sum := func(p string) string {
				out := s.must("sandbox", "exec", sb, "--", "sha256sum", p)
				return strings.Fields(out)[0]
			}
			s.must("sandbox", "exec", sb, "--", "sh", "-c", "mkdir -p /w && head -c 5000123 /dev/urandom > /w/made-inside")
			dst := t.TempDir()
			if _, _, err := c.CopyFrom(ctx, "/w/made-inside", dst); err != nil {
				t.Fatal(err)
			}
			if got := hostSum(t, filepath.Join(dst, "made-inside")); got != sum("/w/made-inside") {
				t.Errorf("the downloaded file differs from the sandbox's")
			}
			// The same through the service's API (reins sandbox cp), which
			// serves Download from the staged file too.
			viaCLI := t.TempDir()
			s.must("sandbox", "cp", sb+":/w/made-inside", viaCLI)
			if got := hostSum(t, filepath.Join(viaCLI, "made-inside")); got != sum("/w/made-inside") {
				t.Errorf("the file downloaded through the API differs from the sandbox's")
			}
			src := filepath.Join(t.TempDir(), "from-host")
			data := make([]byte, 4<<20+3)
			rand.Read(data)
			if err := os.WriteFile(src, data, 0o755); err != nil {
				t.Fatal(err)
			}
			if _, err := c.CopyTo(ctx, src, "/w/in"); err != nil {
				t.Fatal(err)
			}
			if got := sum("/w/in/from-host"); got != hostSum(t, src) {
				t.Errorf("the uploaded file differs inside the sandbox")
			}
			// Into another mount (gVisor's /tmp is a tmpfs of its own): the
			// rename cannot cross it, the tar stream does.
			if _, err := c.CopyTo(ctx, src, "/tmp"); err != nil {
				t.Fatal(err)
			}
			if got := sum("/tmp/from-host"); got != hostSum(t, src) {
				t.Errorf("the file uploaded to /tmp differs inside the sandbox")
			}
			if out := s.must("sandbox", "exec", sb, "--", "sh", "-c", "/w/in/from-host; stat -c '%u %a' /w/in/from-host; ls -A /.reins/xfer | wc -l"); !strings.Contains(out, "0 755\n0\n") {
				t.Errorf("the uploaded file's owner and mode, and the staging directory's entries: %q, want \"0 755\" and 0", out)
			}
		})
	}
}

func hostSum(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// TestHostileStaging: the sandbox owns its staging directory and plays
// what it can there against the host that reads and writes it — a symlink
// to a host file under a staged name, a fifo, a file far larger than
// announced, the whole directory swapped for a symlink to a host
// directory. The host reads no host file, writes nothing outside, does not
// hang, and reads no more than announced; transfers still work over the
// socket.
//
// gVisor only: there the host's view of the root filesystem is the one the
// sandbox writes (--overlay2=none). A runc sandbox runs on an idmapped
// overlay of its own (oci.UserNS), the host's view stays empty, and its
// transfers go over the socket (TestStagedTransfers covers that they do).
func TestHostileStaging(t *testing.T) {
	for _, backend := range []string{"gvisor"} {
		t.Run(backend, func(t *testing.T) {
			s := startService(t)
			sb := s.create("--backend", backend)
			c, rootfs := stagingClient(t, s, sb)
			secret := filepath.Join(t.TempDir(), "secret")
			if err := os.WriteFile(secret, []byte("host secret\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			const link, fifo, huge = "11111111111111111111111111111111", "22222222222222222222222222222222", "33333333333333333333333333333333"
			s.must("sandbox", "exec", sb, "--", "sh", "-c", strings.Join([]string{
				"cd /.reins/xfer",
				"ln -s " + secret + " " + link,
				"mkfifo " + fifo,
				"truncate -s 1099511627776 " + huge,
			}, " && "))
			open := func(name string, size int64) error {
				done := make(chan error, 1)
				go func() {
					f, err := client.OpenStaged(rootfs, name, size)
					if err == nil {
						f.Close()
					}
					done <- err
				}()
				select {
				case err := <-done:
					return err
				case <-time.After(10 * time.Second):
					t.Fatalf("opening the staged %s hangs", name)
					return nil
				}
			}
			// Opened as a plain path, the symlink leads to the host file.
			if err := open(link, int64(len("host secret\n"))); !errors.Is(err, client.ErrNotStaged) {
				t.Errorf("a staged symlink to a host file: err %v, want ErrNotStaged", err)
			}
			// (gVisor keeps a fifo made on its root filesystem to itself:
			// the host sees no file, which is as good.)
			if err := open(fifo, 0); !errors.Is(err, client.ErrNotStaged) && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a staged fifo: err %v, want ErrNotStaged or not found", err)
			}
			if err := open(huge, 10); !errors.Is(err, client.ErrNotStaged) {
				t.Errorf("a 1 TiB file announced as 10 bytes: err %v, want ErrNotStaged", err)
			}

			// The whole staging directory swapped for a symlink to a host
			// directory that holds a file under a staged name.
			hostDir := t.TempDir()
			if err := os.WriteFile(filepath.Join(hostDir, link), []byte("host secret\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			s.must("sandbox", "exec", sb, "--", "sh", "-c", "rm -rf /.reins/xfer && ln -s "+hostDir+" /.reins/xfer && mkdir -p "+hostDir+" && echo inside > /w.txt")
			if err := open(link, int64(len("host secret\n"))); !errors.Is(err, client.ErrNotStaged) {
				t.Errorf("a staging directory that is a symlink to a host directory: err %v, want ErrNotStaged", err)
			}
			if f, err := client.CreateStaged(rootfs, fifo); err == nil {
				f.Close()
				t.Errorf("the host created a staged file through the symlinked staging directory")
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			src := filepath.Join(t.TempDir(), "up.txt")
			os.WriteFile(src, []byte("uploaded\n"), 0o644)
			if _, err := c.CopyTo(ctx, src, "/w"); err != nil {
				t.Fatalf("upload with a broken staging directory: %v", err)
			}
			dst := t.TempDir()
			if _, _, err := c.CopyFrom(ctx, "/w.txt", dst); err != nil {
				t.Fatalf("download with a broken staging directory: %v", err)
			}
			if got, _ := os.ReadFile(filepath.Join(dst, "w.txt")); string(got) != "inside\n" {
				t.Errorf("downloaded %q, want the sandbox's file", got)
			}
			ents, _ := os.ReadDir(hostDir)
			if len(ents) != 1 {
				t.Errorf("the host directory behind the symlink has %d entries, want only the one the test made", len(ents))
			}
			if got, _ := os.ReadFile(filepath.Join(hostDir, link)); !bytes.Equal(got, []byte("host secret\n")) {
				t.Errorf("the host file was changed: %q", got)
			}
		})
	}
}

// loopsBacking lists the loop devices whose backing file is under dir
// (a sandbox's disk image, deleted or not).
func loopsBacking(dir string) []string {
	var out []string
	devs, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, p := range devs {
		b, err := os.ReadFile(p)
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), dir+"/") {
			out = append(out, filepath.Base(filepath.Dir(filepath.Dir(p)))+": "+strings.TrimSpace(string(b)))
		}
	}
	return out
}

// TestHostileStagingDownloadOutlivesSandbox: a tenant starts a download
// through the API (served from the staged file on the host), reads a
// little of it and stops reading, then removes the sandbox. The service's
// open file on the sandbox's overlay must not outlive the sandbox: held,
// it keeps the sandbox's filesystem (detached) and its loop device and
// deleted disk image alive for as long as the caller stalls, on no
// tenant's account — repeated, a tenant fills the host's disk past every
// limit.
func TestHostileStagingDownloadOutlivesSandbox(t *testing.T) {
	s := startService(t)
	sb := s.create("--backend", "gvisor")
	s.must("sandbox", "exec", sb, "--", "sh", "-c", "head -c 67108864 /dev/urandom > /big")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	api := reinsclient.New(s.url, s.token)
	defer api.Close()
	stream, err := api.Sandbox(sb).RPC().Download(ctx, connect.NewRequest(&executorv1.DownloadRequest{Path: "/big"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("the download sent nothing: %v", stream.Err())
	}
	// Stalled: no more reads. The service blocks in its send with the
	// staged file open.
	dir := filepath.Join(s.dataDir, "sandboxes", sb)
	if len(loopsBacking(dir)) == 0 {
		t.Fatalf("no loop device backs %s: the test does not see the sandbox's disk", dir)
	}
	s.must("sandbox", "rm", sb)
	eventually(t, 20*time.Second, "the removed sandbox's loop device to go", func() (bool, string) {
		l := loopsBacking(dir)
		return len(l) == 0, strings.Join(l, ", ")
	})
	// Read on: the download ends in an error (the file did not arrive
	// whole), and that error names no host path.
	done := make(chan error, 1)
	go func() {
		for stream.Receive() {
		}
		done <- stream.Err()
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("the download of a removed sandbox's file ended without an error")
		} else if strings.Contains(err.Error(), s.dataDir) {
			t.Errorf("the download's error names a host path: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("the download of a removed sandbox's file does not end")
	}
}

// TestHostileStagingFullDisk: the host's writes into the staging directory
// land on the sandbox's disk and stop at its limit — an upload larger than
// the disk fails as "no space", promptly, leaving no staged file, and the
// disk image on the host grows no larger than the sandbox's --disk; a disk
// the sandbox filled itself makes the next upload fail the same way, not
// hang.
func TestHostileStagingFullDisk(t *testing.T) {
	s := startService(t)
	sb := s.create("--backend", "gvisor", "--disk", "32M")
	c, _ := stagingClient(t, s, sb)
	dir := filepath.Join(s.dataDir, "sandboxes", sb)
	src := filepath.Join(t.TempDir(), "big")
	data := make([]byte, 64<<20)
	rand.Read(data)
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	upload := func(what string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := c.CopyTo(ctx, src, "/w")
		if errdefs.Kind(err) != errdefs.ErrNoSpace {
			t.Errorf("%s: upload of 64 MiB into a 32 MiB disk: %v, want a no-space error", what, err)
		}
		if err != nil && strings.Contains(err.Error(), s.dataDir) {
			t.Errorf("%s: the error names a host path: %v", what, err)
		}
		if out := s.must("sandbox", "exec", sb, "--", "sh", "-c", "ls -A /.reins/xfer | wc -l"); strings.TrimSpace(out) != "0" {
			t.Errorf("%s: %s staged files left behind", what, strings.TrimSpace(out))
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, "disk.img"), &st); err != nil {
			t.Fatal(err)
		}
		if st.Blocks*512 > 32<<20 {
			t.Errorf("%s: the disk image holds %d bytes on the host, beyond the sandbox's 32 MiB", what, st.Blocks*512)
		}
	}
	upload("an empty disk")
	s.run("sandbox", "exec", sb, "--", "dd", "if=/dev/zero", "of=/fill", "bs=1M", "count=64")
	upload("a disk the sandbox filled")
}

// TestHostileStagingRunc: a runc sandbox's root is an idmapped overlay
// mounted elsewhere (oci.UserNS); the host's view of it (DIR/rootfs) is
// an empty mount point while it runs. A file the sandbox puts under a
// staged name is not what the host reads — the host finds nothing and
// creates nothing there, and the transfers go over the socket, with the
// sandbox's own bytes.
func TestHostileStagingRunc(t *testing.T) {
	s := startService(t)
	sb := s.create("--backend", "runc")
	c, rootfs := stagingClient(t, s, sb)
	const name = "44444444444444444444444444444444"
	s.must("sandbox", "exec", sb, "--", "sh", "-c", "echo staged > /.reins/xfer/"+name+" && echo inside > /w.txt")
	if f, err := client.OpenStaged(rootfs, name, int64(len("staged\n"))); err == nil {
		f.Close()
		t.Errorf("the host opened a runc sandbox's staged file through DIR/rootfs")
	}
	if f, err := client.CreateStaged(rootfs, name); err == nil {
		f.Close()
		t.Errorf("the host created a staged file under a runc sandbox's DIR/rootfs")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dst := t.TempDir()
	if _, _, err := c.CopyFrom(ctx, "/w.txt", dst); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dst, "w.txt")); string(got) != "inside\n" {
		t.Errorf("downloaded %q, want the sandbox's file", got)
	}
	// Nor does the sandbox stage (link, copying up from the image) a
	// file the host cannot read: an image file stays in the image.
	if _, _, err := c.CopyFrom(ctx, "/bin/busybox", dst); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(s.dataDir, "sandboxes", sb, "disk", "upper", "bin", "busybox")); err == nil {
		t.Errorf("downloading an image file from a runc sandbox copied it up onto its disk")
	}
	if ents, err := os.ReadDir(rootfs); err != nil || len(ents) != 0 {
		t.Errorf("the host's view of a running runc sandbox's root holds %d entries (%v), want an empty mount point", len(ents), err)
	}
}

// TestStagedDownloadSeesMappedWrites: a program in the sandbox writes a
// file through a shared mapping and keeps it (no msync, no munmap). A
// download must give what the sandbox itself reads in the file, whether
// it comes from the host's view of the disk or over the socket.
func TestStagedDownloadSeesMappedWrites(t *testing.T) {
	s := startService(t)
	sb := s.create("--backend", "gvisor")
	c, rootfs := stagingClient(t, s, sb)
	bin := filepath.Join(t.TempDir(), "mmapwrite")
	build := exec.Command("go", "build", "-o", bin, filepath.Join(repoRoot(), "test/e2e/testdata/mmapwrite.go"))
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building mmapwrite: %v\n%s", err, out)
	}
	s.must("sandbox", "cp", bin, sb+":/mmapwrite")
	s.must("sandbox", "exec", "--detach", sb, "--", "/mmapwrite", "/m")
	eventually(t, 20*time.Second, "the mapped write", func() (bool, string) {
		out := s.run("sandbox", "exec", sb, "--", "head", "-c", "1", "/m")
		return out.stdout == "b", out.String()
	})
	// What the staged path reads: the host's view of the file (read
	// plainly here, by the test).
	if got, _ := os.ReadFile(filepath.Join(rootfs, "m")); !bytes.Equal(got, bytes.Repeat([]byte("b"), 4096)) {
		t.Errorf("the host's view of the file holds %.16q… (%d bytes), not the sandbox's mapped write", got, len(got))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dst := t.TempDir()
	if _, _, err := c.CopyFrom(ctx, "/m", dst); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dst, "m")); !bytes.Equal(got, bytes.Repeat([]byte("b"), 4096)) {
		t.Errorf("downloaded %.16q… (%d bytes), want what the sandbox reads: 4096 b's", got, len(got))
	}
	viaCLI := t.TempDir()
	s.must("sandbox", "cp", sb+":/m", viaCLI)
	if got, _ := os.ReadFile(filepath.Join(viaCLI, "m")); !bytes.Equal(got, bytes.Repeat([]byte("b"), 4096)) {
		t.Errorf("downloaded through the API %.16q… (%d bytes), want what the sandbox reads: 4096 b's", got, len(got))
	}
}

// rssBytes is process pid's resident memory.
func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// TestHostileStagingStalledDownloads: the service serves Download itself
// (a chunk read from the staged file, or relayed from the executor, held
// while it is sent), so a caller that opens many downloads and reads none
// makes the service, not the sandbox, hold their buffers. What one
// sandbox's stalled downloads pin in the service stays bounded.
func TestHostileStagingStalledDownloads(t *testing.T) {
	s := startService(t)
	sb := s.create("--backend", "gvisor")
	s.must("sandbox", "exec", sb, "--", "sh", "-c", "head -c 67108864 /dev/urandom > /big")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	api := reinsclient.New(s.url, s.token)
	defer api.Close()
	rpc := api.Sandbox(sb).RPC()
	// Warm: one download read to the end.
	if st, err := rpc.Download(ctx, connect.NewRequest(&executorv1.DownloadRequest{Path: "/big"})); err == nil {
		for st.Receive() {
		}
		st.Close()
	}
	before := rssBytes(t, s.cmd.Process.Pid)
	const n = 64
	var started sync.WaitGroup
	for range n {
		started.Add(1)
		go func() {
			defer started.Done()
			st, err := rpc.Download(ctx, connect.NewRequest(&executorv1.DownloadRequest{Path: "/big"}))
			if err != nil {
				return
			}
			st.Receive() // the first message, then no more reads
			<-ctx.Done()
			st.Close()
		}()
	}
	time.Sleep(5 * time.Second)
	grown := rssBytes(t, s.cmd.Process.Pid) - before
	t.Logf("%d stalled downloads: the service's RSS grew by %d MiB", n, grown>>20)
	if grown > 48<<20 {
		t.Errorf("%d stalled downloads of one sandbox grew the service's resident memory by %d MiB", n, grown>>20)
	}
	cancel()
	started.Wait()
}
