package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/client"
)

// The lifecycle of short-lived sandboxes: suspend, resume, snapshot, fork,
// events, and the snapshots (docs/lifecycle.md).

// spin shows what runs, with the time it has taken, until the returned
// stop is called: saving a workspace is one call that answers at its end.
func spin(what string) (stop func()) {
	bar := newStatusLine(os.Stderr)
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		frames := `|/-\`
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			bar.show(fmt.Sprintf("%c %s  (%.1fs)", frames[i%len(frames)], what, time.Since(bar.start).Seconds()), false)
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(done)
		<-ended
		bar.Done()
	}
}

// spinCall makes call under a spinner that says what it does (the call
// answers only at its end), then prints the answer: as JSON with asJSON,
// else in words.
func spinCall[T proto.Message](c *cobra.Command, asJSON bool, what string, call func(context.Context, *client.Client) (T, error), words func(T) string) error {
	cl, ctx, cancel, err := dial()
	if err != nil {
		return err
	}
	defer cancel()
	stop := spin(what)
	v, err := call(ctx, cl)
	stop()
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(c.OutOrStdout(), v)
	}
	fmt.Fprintln(c.OutOrStdout(), words(v))
	return nil
}

// savedWords says what a save stored: "12 files, 3.4 MiB (1.1 MiB new)".
func savedWords(s *reinsv1.Snapshot) string {
	return fmt.Sprintf("%d files, %s (%s new)", s.GetFiles(), humanBytes(s.GetBytes()), humanBytes(s.GetStoredBytes()))
}

func suspendCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "suspend ID",
		Short: "Save a sandbox's workspace and delete its guest (no CPU, memory or disk held); resume brings it back",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			return spinCall(c, asJSON, "suspending "+args[0]+": saving its workspace",
				func(ctx context.Context, cl *client.Client) (*reinsv1.SuspendSandboxResponse, error) {
					return cl.Suspend(ctx, args[0])
				},
				func(r *reinsv1.SuspendSandboxResponse) string {
					return fmt.Sprintf("%s suspended: workspace %s saved, %s", args[0], shortDigest(r.Workspace.GetDigest()), savedWords(r.Workspace))
				})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the sandbox and its saved workspace as JSON")
	return c
}

func resumeCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "resume ID",
		Short: "Bring a suspended sandbox back on a fresh guest (same id, files, limits, labels, network rules), or a paused one",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			return spinCall(c, asJSON, "resuming "+args[0],
				func(ctx context.Context, cl *client.Client) (*reinsv1.Sandbox, error) { return cl.Resume(ctx, args[0]) },
				func(sb *reinsv1.Sandbox) string { return sb.Id + " " + sandboxStateName(sb.State) })
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the sandbox as JSON")
	return c
}

func snapshotSandboxCmd() *cobra.Command {
	var name string
	var asJSON bool
	c := &cobra.Command{
		Use:   "snapshot ID --name NAME",
		Short: "Save a running sandbox's workspace as a snapshot, usable as --image snapshot:NAME",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			if name == "" {
				return usageError{errors.New("snapshot needs --name NAME (a-z, 0-9, '.', '_', '-'; create from it with --image snapshot:NAME)")}
			}
			return spinCall(c, asJSON, "saving "+args[0]+"'s workspace as "+name,
				func(ctx context.Context, cl *client.Client) (*reinsv1.Snapshot, error) {
					return cl.Snapshot(ctx, args[0], name)
				},
				func(s *reinsv1.Snapshot) string {
					return fmt.Sprintf("snapshot %s (%s): %s", s.Name, shortDigest(s.Digest), savedWords(s))
				})
		},
	}
	c.Flags().StringVar(&name, "name", "", "the snapshot's name")
	c.Flags().BoolVar(&asJSON, "json", false, "print the snapshot as JSON")
	return c
}

func forkCmd() *cobra.Command {
	var count int
	var asJSON, memory bool
	c := &cobra.Command{
		Use:   "fork ID [--count N] [--memory]",
		Short: "Make N new sandboxes from a running sandbox's current files (and, with --memory, its processes); prints one id per line",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			if count < 1 || count > 64 {
				return usageError{errors.New("--count must be from 1 to 64")}
			}
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			stop := spin(fmt.Sprintf("forking %s into %d sandboxes", args[0], count))
			sbs, err := cl.ForkWith(ctx, args[0], count, memory)
			stop()
			if err != nil {
				return err
			}
			if asJSON {
				return printJSONList(c.OutOrStdout(), sbs)
			}
			for _, sb := range sbs {
				fmt.Fprintln(c.OutOrStdout(), sb.Id)
			}
			return nil
		},
	}
	c.Flags().IntVar(&count, "count", 1, "how many sandboxes (1 to 64)")
	c.Flags().BoolVar(&memory, "memory", false, "carry the source's memory and processes too (gvisor: a checkpoint restored in each fork, one after another, so slower than a fork of files)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the sandboxes as a JSON array")
	return c
}

func eventsCmd() *cobra.Command {
	var follow, asJSON bool
	var after int64
	c := &cobra.Command{
		Use:   "events [ID]",
		Short: "Show sandboxes' lifecycle events (created, expiring, suspended, resumed, snapshot, forked, stopped); all yours without ID",
		Args:  usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			w := c.OutOrStdout()
			return cl.Events(ctx, id, after, follow, func(e *reinsv1.SandboxLifecycleEvent) error {
				if asJSON {
					return printJSONLine(w, e)
				}
				printEvent(w, e)
				return nil
			})
		},
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "wait for new events until interrupted")
	c.Flags().Int64Var(&after, "after", 0, "only events after this sequence number")
	c.Flags().BoolVar(&asJSON, "json", false, "print each event as a JSON line")
	return c
}

func printEvent(w io.Writer, e *reinsv1.SandboxLifecycleEvent) {
	line := fmt.Sprintf("%d  %s  %s  %-9s", e.Seq, time.Unix(0, e.TimeUnixNano).Format("15:04:05.000"), e.Sandbox, e.Kind)
	if r := sandboxReasonName(e.Reason); r != "" {
		line += "  " + r
	}
	if e.Message != "" {
		line += "  " + e.Message
	}
	if e.Snapshot != "" {
		line += "  [" + shortDigest(e.Snapshot) + "]"
	}
	fmt.Fprintln(w, line)
}

// shortDigest is the first 12 hex digits of a sha256 digest.
func shortDigest(d string) string {
	h := strings.TrimPrefix(d, "sha256:")
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

func snapshotCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "snapshot",
		Short: "List and remove saved workspaces (reins sandbox snapshot ID --name NAME makes one)",
	}
	c.AddCommand(snapshotLsCmd(), snapshotRmCmd())
	return group(c)
}

func snapshotLsCmd() *cobra.Command {
	return listCmd("List your snapshots, newest first, with who needs each", "NAME\tDIGEST\tSANDBOX\tIMAGE\tCREATED\tFILES\tSIZE\tNEEDED BY",
		(*client.Client).ListSnapshots, func(s *reinsv1.Snapshot) string {
			name := s.Name
			if name == "" {
				name = "-"
			}
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s", name, shortDigest(s.Digest), s.Sandbox, s.Image,
				ago(s.CreatedUnixNano), s.Files, humanBytes(s.Bytes), strings.Join(s.NeededBy, ","))
		})
}

func snapshotRmCmd() *cobra.Command {
	return removeCmd("rm NAME...", "Remove snapshots (a name, or an unnamed one's sha256:… digest); refused while a sandbox or template needs one",
		"snapshot", (*client.Client).DeleteSnapshot)
}

// removeEach removes each of names (of what: "sandbox", "snapshot") with
// remove, printing each one removed, then how many on stderr (when there
// were several, or the names were chosen by a filter: bulk); the errors of
// the others are joined.
func removeEach(c *cobra.Command, what string, names []string, bulk bool, remove func(*client.Client, context.Context, string) error) error {
	cl, ctx, cancel, err := dial()
	if err != nil {
		return err
	}
	defer cancel()
	bar := newStatusLine(os.Stderr)
	var errs []error
	removed := 0
	for i, name := range names {
		bar.show(fmt.Sprintf("removing %s (%d of %d)  (%.1fs)", name, i+1, len(names), time.Since(bar.start).Seconds()), true)
		if err := remove(cl, ctx, name); err != nil {
			errs = append(errs, err)
			continue
		}
		bar.Done()
		removed++
		fmt.Fprintln(c.OutOrStdout(), name)
	}
	bar.Done()
	if len(names) != 1 || bulk {
		fmt.Fprintf(c.ErrOrStderr(), "removed %s\n", count(removed, what))
	}
	return errors.Join(errs...)
}

// count is "1 sandbox", "3 sandboxes".
func count(n int, what string) string {
	switch {
	case n == 1:
		return "1 " + what
	case strings.HasSuffix(what, "x") || strings.HasSuffix(what, "s"):
		return fmt.Sprintf("%d %ses", n, what)
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// onExpireArg is the API's action for --on-expire.
func onExpireArg(s string) (reinsv1.ExpireAction, error) {
	switch s {
	case "":
		return reinsv1.ExpireAction_EXPIRE_ACTION_UNSPECIFIED, nil
	case "suspend":
		return reinsv1.ExpireAction_EXPIRE_ACTION_SUSPEND, nil
	case "delete":
		return reinsv1.ExpireAction_EXPIRE_ACTION_DELETE, nil
	}
	return 0, usageError{fmt.Errorf("--on-expire %q: choose suspend (keep the workspace; resume brings it back) or delete", s)}
}
