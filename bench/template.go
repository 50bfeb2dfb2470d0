package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/sandbox/manager"
	"github.com/reinsdev/reins/sandbox/template"
)

// template: a three-step template build (16 files of 64 KiB, an env, a
// file that appends) rebuilt with every step from the cache, beside the
// same build with --no-cache; and create → first exec from that
// template (its snapshot restored onto a fresh disk, its env), beside
// create → first exec of plain busybox on the same manager, round by
// round.
func (b *bench) template(rounds int) error {
	m, err := b.workspaceManager("tmpl", nil)
	if err != nil {
		return err
	}
	defer m.Close()
	store, err := template.NewStore(filepath.Join(b.dir, "templates"))
	if err != nil {
		return err
	}
	m.UseTemplates(store)
	m.AddSnapshotUsers(store)
	builder := &template.Builder{Store: store, Sandboxes: manager.TemplateBuilds{M: m}}
	spec := template.Spec{Name: "bench", From: "busybox", Steps: []template.Step{
		{Kind: template.StepRun, Text: "mkdir -p /srv && for i in $(seq 16); do head -c 65536 /dev/urandom > /srv/f$i; done"},
		{Kind: template.StepEnv, Text: "BENCH=1"},
		{Kind: template.StepRun, Text: "echo built >> /srv/log"},
	}}
	var cold, cached, fromTmpl, fromImage []time.Duration
	for range rounds {
		spec.NoCache = true
		t0 := time.Now()
		if _, err := builder.Build(b.ctx, "", spec, nil); err != nil {
			return err
		}
		cold = append(cold, time.Since(t0))
		spec.NoCache = false
		t0 = time.Now()
		t, err := builder.Build(b.ctx, "", spec, nil)
		if err != nil {
			return err
		}
		if t.CachedSteps != len(spec.Steps) {
			return fmt.Errorf("the rebuild took %d steps from the cache, want %d", t.CachedSteps, len(spec.Steps))
		}
		cached = append(cached, time.Since(t0))
		for _, img := range []string{template.Prefix + "bench", "busybox"} {
			d, err := createFirstExec(b, m, img)
			if err != nil {
				return err
			}
			if img == "busybox" {
				fromImage = append(fromImage, d)
			} else {
				fromTmpl = append(fromTmpl, d)
			}
		}
	}
	pc, pn := pct(cached, 50), pct(cold, 50)
	b.add("template build, 3 steps all cached (p50)", ms(pc), ms(pn)+" the same build with --no-cache", ratio(pc, pn), "")
	pt, pi := pct(fromTmpl, 50), pct(fromImage, 50)
	b.add("create → first exec from template:NAME, 1 MiB in 16 files (p50)", ms(pt), ms(pi)+" create → first exec of busybox", ratio(pt, pi), "")
	return nil
}

// createFirstExec times create → first exec of `true` of img on m, then
// removes the sandbox.
func createFirstExec(b *bench, m *manager.Manager, img string) (time.Duration, error) {
	t0 := time.Now()
	info, err := m.Create(b.ctx, "", sandbox.Spec{Image: img}, nil)
	if err != nil {
		return 0, err
	}
	defer m.Delete(b.ctx, "", info.ID)
	ex, err := m.Client(b.ctx, "", info.ID)
	if err != nil {
		return 0, err
	}
	if err := execTrue(b.ctx, ex); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}
