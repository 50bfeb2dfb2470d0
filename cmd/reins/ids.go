package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/reinsdev/reins/client"
)

// Id prefixes, as docker and git take them: a command given part of a
// sandbox or run id resolves it on this side by listing the caller's own
// (so another tenant's ids are never candidates: they answer as missing).
// An exact id wins; one match is used; several are an error that lists
// them; none leaves the argument as typed, for the service to answer
// "not found" in its usual words.

// idKind is what an id argument names.
type idKind int

const (
	sandboxID idKind = iota + 1
	runID
)

// Full ids need no lookup: 12 hex digits for a sandbox, run_ and 16 for a
// run (sandbox/manager newID, agent newRunID).
func (k idKind) full(s string) bool {
	switch k {
	case sandboxID:
		return len(s) == 12 && isHex(s)
	case runID:
		h, ok := strings.CutPrefix(s, "run_")
		return ok && len(h) == 16 && isHex(h)
	}
	return false
}

func (k idKind) String() string {
	if k == runID {
		return "run"
	}
	return "sandbox"
}

func isHex(s string) bool {
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdef", r) {
			return false
		}
	}
	return true
}

// resolveIDs makes every command under `sandbox` and `runs` whose first
// argument is an ID (its Use says "ID", "[ID]" or "ID...") accept a prefix.
func resolveIDs(root *cobra.Command) {
	for _, c := range root.Commands() {
		switch c.Name() {
		case "sandbox":
			wrapIDs(c, sandboxID)
		case "runs":
			wrapIDs(c, runID)
		}
	}
}

func wrapIDs(c *cobra.Command, kind idKind) {
	for _, sub := range c.Commands() {
		wrapIDs(sub, kind)
	}
	all, ok := idArgs(c.Use)
	if !ok || c.RunE == nil {
		return
	}
	run := c.RunE
	c.RunE = func(c *cobra.Command, args []string) error {
		n := min(len(args), 1)
		if all {
			n = len(args)
		}
		if n > 0 {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			ctx, cancel := cmdContext()
			defer cancel()
			r := resolver{cl: cl, kind: kind}
			for i := range n {
				if args[i], err = r.resolve(ctx, args[i]); err != nil {
					return err
				}
			}
		}
		return run(c, args)
	}
}

// idArgs reads a command's Use: whether its first argument is an id, and
// whether every argument is ("rm ID...").
func idArgs(use string) (all, ok bool) {
	for _, f := range strings.Fields(use)[1:] {
		if strings.HasPrefix(f, "[flags]") || strings.HasPrefix(f, "[-") {
			continue
		}
		switch f {
		case "ID", "[ID]":
			return false, true
		case "ID...":
			return true, true
		}
		return false, false
	}
	return false, false
}

// resolver resolves id prefixes of one kind, listing at most once.
type resolver struct {
	cl   *client.Client
	kind idKind
	ids  []string
	err  error
	done bool
}

func (r *resolver) resolve(ctx context.Context, arg string) (string, error) {
	if arg == "" || r.kind.full(arg) {
		return arg, nil
	}
	if !r.done {
		r.ids, r.err = r.list(ctx)
		r.done = true
	}
	if r.err != nil {
		// The command's own call reports the service's trouble.
		return arg, nil
	}
	return pickID(r.kind, r.ids, arg)
}

func (r *resolver) list(ctx context.Context) ([]string, error) {
	var ids []string
	switch r.kind {
	case sandboxID:
		sbs, err := r.cl.List(ctx, nil)
		if err != nil {
			return nil, err
		}
		for _, sb := range sbs {
			ids = append(ids, sb.Id)
		}
	case runID:
		runs, err := r.cl.ListRuns(ctx, nil)
		if err != nil {
			return nil, err
		}
		for _, run := range runs {
			ids = append(ids, run.Id)
		}
	}
	return ids, nil
}

// pickID is the one of ids that arg names: itself, or the only id it
// begins (a run's "run_" may be left out).
func pickID(kind idKind, ids []string, arg string) (string, error) {
	if slices.Contains(ids, arg) {
		return arg, nil
	}
	var matches []string
	for _, id := range ids {
		if strings.HasPrefix(id, arg) || (kind == runID && strings.HasPrefix(id, "run_"+arg)) {
			matches = append(matches, id)
		}
	}
	switch len(matches) {
	case 0:
		return arg, nil
	case 1:
		return matches[0], nil
	}
	slices.Sort(matches)
	n, more := len(matches), ""
	if n > 10 {
		more = fmt.Sprintf(" and %d more", len(matches)-10)
		matches = matches[:10]
	}
	return "", usageError{fmt.Errorf("%q is the start of %d %s ids: %s%s; give more of the id", arg, n, kind,
		strings.Join(matches, ", "), more)}
}

// resolveOne resolves one id argument outside the wrapped commands (cp's
// ID:/path, run --in ID).
func resolveOne(ctx context.Context, cl *client.Client, kind idKind, arg string) (string, error) {
	r := resolver{cl: cl, kind: kind}
	return r.resolve(ctx, arg)
}
