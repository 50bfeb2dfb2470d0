package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/reinsdev/reins/client"
)

func pauseCmd() *cobra.Command {
	var asJSON, orSuspend bool
	c := &cobra.Command{
		Use:   "pause ID [--or-suspend]",
		Short: "Keep a sandbox's memory and processes too (gVisor checkpoint) and release its CPU and memory; resume continues them",
		Long: `Pause saves a running sandbox's memory and processes to the service's disk and
releases its compute; reins sandbox resume ID continues its processes where they
were, with their open files and listening sockets. Only the gvisor backend can
keep memory: on runc pause is refused, or with --or-suspend the sandbox is
suspended instead (its workspace kept, its processes ended).`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			stop := pauseStatus(ctx, cl, args[0])
			resp, err := cl.Pause(ctx, args[0], orSuspend)
			stop()
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.OutOrStdout(), resp)
			}
			if resp.SuspendedInstead {
				fmt.Fprintf(c.OutOrStdout(), "%s suspended instead: its backend (%s) cannot keep memory; its workspace %s is saved, its processes ended\n",
					args[0], resp.Sandbox.GetSpec().GetBackend(), shortDigest(resp.Sandbox.GetWorkspace()))
				return nil
			}
			fmt.Fprintf(c.OutOrStdout(), "%s paused: memory image %s kept; reins sandbox resume %s continues it\n",
				args[0], humanBytes(resp.MemoryBytes), args[0])
			return nil
		},
	}
	c.Flags().BoolVar(&orSuspend, "or-suspend", false, "on a backend that cannot keep memory (runc), suspend the sandbox instead of refusing")
	c.Flags().BoolVar(&asJSON, "json", false, "print the sandbox, whether it was suspended instead, and the memory image's size as JSON")
	return c
}

// pauseStatus shows, on a terminal, how much of the sandbox's memory has
// been written so far (the service answers a pausing sandbox's Get with
// it), until stop.
func pauseStatus(ctx context.Context, cl *client.Client, id string) (stop func()) {
	bar := newStatusLine(os.Stderr)
	if !bar.tty {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		text := "pausing " + id + ": saving its memory"
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if sb, err := cl.Get(ctx, id); err == nil && sb.MemoryBytes > 0 {
				text = fmt.Sprintf("pausing %s: %s of memory written", id, humanBytes(int64(sb.MemoryBytes)))
			}
			bar.show(fmt.Sprintf("%s  (%.1fs)", text, time.Since(bar.start).Seconds()), false)
		}
	}()
	return func() {
		cancel()
		<-ended
		bar.Done()
	}
}
