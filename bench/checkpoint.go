package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/reinsdev/reins/agent"
	"github.com/reinsdev/reins/model"
	"github.com/reinsdev/reins/model/script"
	"github.com/reinsdev/reins/runlog"
	"github.com/reinsdev/reins/sandbox/manager"
)

// checkpoint: what checkpoints cost a run. A scripted run in a gVisor
// sandbox fills its workspace (32 files of 256 KiB, 8 MiB), then makes n
// write_file calls of 4 KiB each; the time per call, from the first
// call's result to the end, with --checkpoint-every 1 and 10, beside the
// same run with checkpoints off, run after run in one manager with a
// workspace store; and the median time of one checkpoint (its event after
// the call's result): the first, which saves all 8 MiB, and a later one,
// which adds one file.
func (b *bench) checkpoint(n, rounds int) error {
	m, err := b.workspaceManager("cp", nil)
	if err != nil {
		return err
	}
	defer m.Close()
	st, blobs, err := b.stores("checkpoint")
	if err != nil {
		return err
	}
	defer st.Close()
	turns := []any{map[string]any{"tool_calls": []any{map[string]any{"name": "bash", "input": map[string]any{
		"command": "for i in $(seq 32); do head -c 262144 /dev/urandom > /workspace/f$i; done"}}}}}
	content := strings.Repeat("x", 4096)
	for i := range n {
		turns = append(turns, map[string]any{"tool_calls": []any{map[string]any{"name": "write_file", "input": map[string]any{
			"path": fmt.Sprintf("/workspace/w%d.txt", i), "content": content}}}})
	}
	turns = append(turns, map[string]any{"text": "done"})
	eng, p, err := b.scripted("checkpoint", turns, agent.Config{Store: st, Blobs: blobs, Sandboxes: manager.Runs{M: m}})
	if err != nil {
		return err
	}
	defer eng.Close()
	// run plays the script with checkpoints every `every` calls and
	// returns its time per call after the first, and its checkpoints'.
	run := func(every int) (time.Duration, []time.Duration, error) {
		id, err := eng.Start(b.ctx, "", runlog.Spec{Task: "checkpoint", Model: "script:" + p, MaxSteps: n + 5, CheckpointEvery: &every})
		if err != nil {
			return 0, nil, err
		}
		if err := eng.Wait(b.ctx, id); err != nil {
			return 0, nil, err
		}
		evs, err := st.Events(b.ctx, id, 0, 0)
		if err != nil {
			return 0, nil, err
		}
		var first, last, result time.Time
		var cps []time.Duration
		for _, ev := range evs {
			switch ev.Type {
			case runlog.EventToolResult:
				if first.IsZero() {
					first = ev.Time
				}
				result = ev.Time
			case runlog.EventCheckpoint:
				cps = append(cps, ev.Time.Sub(result))
			case runlog.EventCheckpointFailed:
				return 0, nil, fmt.Errorf("a checkpoint failed: %s", ev.Data)
			case runlog.EventFinished:
				last = ev.Time
				var f runlog.Finished
				json.Unmarshal(ev.Data, &f)
				if f.Status != runlog.StatusSucceeded {
					return 0, nil, fmt.Errorf("the run %s: %s", f.Status, f.Reason)
				}
			}
		}
		return last.Sub(first) / time.Duration(n), cps, nil
	}
	var off, every1, every10, firsts, cps []time.Duration
	for range rounds {
		for _, c := range []struct {
			every int
			into  *[]time.Duration
		}{{0, &off}, {1, &every1}, {10, &every10}} {
			per, cs, err := run(c.every)
			if err != nil {
				return err
			}
			*c.into = append(*c.into, per)
			if c.every == 1 && len(cs) > 1 {
				// The first saves all 8 MiB; the others, one new file.
				firsts, cps = append(firsts, cs[0]), append(cps, cs[1:]...)
			}
		}
	}
	base := pct(off, 50)
	for _, c := range []struct {
		name string
		d    []time.Duration
	}{{"every call", every1}, {"every 10 calls", every10}} {
		ours := pct(c.d, 50)
		b.add(fmt.Sprintf("run step (write_file), checkpoint %s, 8 MiB workspace", c.name), ours.Round(10*time.Microsecond).String(),
			base.Round(10*time.Microsecond).String()+" (checkpoints off)", float64(ours)/float64(base), "")
	}
	for _, c := range []struct {
		name string
		d    []time.Duration
	}{{"the first (8 MiB new)", firsts}, {"a later one (one 4 KiB file new)", cps}} {
		cp := pct(c.d, 50)
		b.add("one checkpoint of an 8 MiB workspace, "+c.name, cp.Round(10*time.Microsecond).String(),
			base.Round(10*time.Microsecond).String()+" (a step, checkpoints off)", float64(cp)/float64(base), "")
	}
	return nil
}

// scripted writes a script model's turns under the bench's directory
// name and returns an engine of cfg that plays it (quietly), and the
// script's path for a spec's script:PATH.
func (b *bench) scripted(name string, turns []any, cfg agent.Config) (*agent.Engine, string, error) {
	data, _ := json.Marshal(map[string]any{"turns": turns})
	p := filepath.Join(b.dir, name, "script.json")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		return nil, "", err
	}
	cfg.Models = func(spec agent.ModelSpec) (model.Model, string, error) {
		m, err := script.Load(strings.TrimPrefix(spec.Model, "script:"))
		return m, p, err
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	eng, err := agent.New(cfg)
	return eng, p, err
}
