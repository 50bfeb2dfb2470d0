package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/gvisor"
	"github.com/reinsdev/reins/sandbox/oci"
)

// pause: Manager.Pause and Resume of a busybox sandbox holding mib MiB of
// random bytes in memory (a file in gVisor's /tmp, which is the sandbox's
// memory), beside raw `runsc checkpoint` and `runsc restore --detach` of a
// bare busybox container holding the same, round by round. Pause is the
// executor letting go of its socket, runsc pause, checkpoint
// --leave-running, delete, the disk unmounted; resume is the disk mounted,
// runsc restore, the executor reached again.
func (b *bench) pause(rounds int, mibs ...int) error {
	for _, mib := range mibs {
		var pauses, resumes, rawCk, rawRe []time.Duration
		var image int64
		rec, ex, remove, err := b.sandbox1(sandbox.Spec{Image: "busybox", Limits: sandbox.Limits{MemoryBytes: 1 << 30}})
		if err != nil {
			return err
		}
		fill := fmt.Sprintf("head -c %dm /dev/urandom > /tmp/fill", mib)
		if _, stderr, exit, err := ex.Run(b.ctx, "sh", "-c", fill); err != nil || exit.GetExitCode() != 0 {
			remove()
			return fmt.Errorf("filling the sandbox's memory: %v %s", err, stderr)
		}
		for range rounds {
			t0 := time.Now()
			_, _, n, err := b.m.Pause(b.ctx, "", rec.ID, false)
			if err != nil {
				remove()
				return err
			}
			pauses, image = append(pauses, time.Since(t0)), n
			t0 = time.Now()
			if _, err := b.m.Resume(b.ctx, "", rec.ID); err != nil {
				remove()
				return err
			}
			resumes = append(resumes, time.Since(t0))

			ck, re, err := b.rawCheckpoint(mib)
			if err != nil {
				remove()
				return err
			}
			rawCk, rawRe = append(rawCk, ck), append(rawRe, re)
		}
		remove()
		p, r, rc, rr := pct(pauses, 50), pct(resumes, 50), pct(rawCk, 50), pct(rawRe, 50)
		b.add(fmt.Sprintf("pause, %d MiB in memory (image %s), p50 of %d", mib, sandbox.FormatBytes(image), rounds), ms(p),
			ms(rc)+" (raw runsc checkpoint)", ratio(p, rc), "")
		b.add(fmt.Sprintf("resume from pause, %d MiB in memory, to the executor answering, p50 of %d", mib, rounds), ms(r),
			ms(rr)+" (raw runsc restore --detach)", ratio(r, rr), "")
	}
	return nil
}

// rawCheckpoint starts a bare busybox container that fills mib MiB of its
// /tmp, then times `runsc checkpoint` and `runsc restore --detach` of it.
func (b *bench) rawCheckpoint(mib int) (ck, re time.Duration, err error) {
	id := fmt.Sprintf("rawck-%d", time.Now().UnixNano())
	bundle := filepath.Join(b.dir, "rawck", id)
	ctl := filepath.Join(bundle, "ctl")
	if err := os.MkdirAll(ctl, 0o755); err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(bundle)
	script := fmt.Sprintf("head -c %dm /dev/urandom > /tmp/fill && touch /workspace/ready && exec sleep 100000", mib)
	spec, err := oci.Spec(sandbox.Bundle{ID: id, Rootfs: b.busybox.Layers[0], Args: []string{"/bin/sh", "-c", script},
		Env: []string{"PATH=/bin"}, Cwd: "/", Mounts: []sandbox.Mount{{Source: ctl, Target: "/workspace"}}})
	if err != nil {
		return 0, 0, err
	}
	spec.Linux.CgroupsPath = ""
	spec.Root.Readonly = true
	js, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), js, 0o644); err != nil {
		return 0, 0, err
	}
	root := filepath.Join(b.dir, "rawckroot")
	// The detached container keeps the runtime's stdio: a file, never a
	// pipe that would hold the call open.
	logPath := filepath.Join(bundle, "runsc.log")
	run := func(args ...string) error {
		log, err := os.Create(logPath)
		if err != nil {
			return err
		}
		defer log.Close()
		cmd := exec.Command(gvisor.DefaultRunsc(), append(append([]string{"--root", root}, gvisor.GlobalFlags...), args...)...)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Run(); err != nil {
			out, _ := os.ReadFile(logPath)
			return fmt.Errorf("runsc %s: %v: %.2000s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	defer run("delete", "--force", id)
	if err := run("run", "--detach", "--bundle", bundle, id); err != nil {
		return 0, 0, err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(filepath.Join(ctl, "ready")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("the raw container did not fill its memory")
		}
		time.Sleep(20 * time.Millisecond)
	}
	img := filepath.Join(bundle, "image")
	t0 := time.Now()
	if err := run("checkpoint", "--image-path", img, id); err != nil {
		return 0, 0, err
	}
	ck = time.Since(t0)
	if err := run("delete", "--force", id); err != nil {
		return 0, 0, err
	}
	t0 = time.Now()
	if err := run("restore", "--detach", "--image-path", img, "--bundle", bundle, id); err != nil {
		return 0, 0, err
	}
	return ck, time.Since(t0), nil
}
