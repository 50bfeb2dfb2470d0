package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/reinsdev/reins/client"
)

func viewCmd() *cobra.Command {
	var f linkFlags
	var takeover bool
	c := &cobra.Command{
		Use:   "view ID",
		Short: "Print a URL that shows a desktop sandbox's screen live in a browser, to watch or take over",
		Long: `Print a URL on the service that shows a desktop sandbox's screen live in a
browser, where you can take the screen over (a run's computer calls wait)
and hand it back. The URL carries your token in its fragment (#token=...),
which the browser never sends anywhere: keep it to yourself. --public makes
a signed link instead that anyone may open until it expires (--ttl, default
1h, at most 168h); it only watches unless made with --takeover.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			return f.run(c, func(ctx context.Context, cl *client.Client) (urlResponse, error) {
				return cl.ViewURL(ctx, args[0], f.public, takeover, f.ttl)
			})
		},
	}
	f.add(c)
	c.Flags().BoolVar(&takeover, "takeover", false, "the --public link may take the screen over, not only watch")
	return c
}

// linkFlags are the flags of a command that prints a URL on the service,
// a signed link with --public (port, view).
type linkFlags struct {
	asJSON, public bool
	ttl            time.Duration
}

func (f *linkFlags) add(c *cobra.Command) {
	c.Flags().BoolVar(&f.public, "public", false, "a signed link that needs no token, until it expires")
	durationVar(c.Flags(), &f.ttl, "ttl", 0, "how long a --public link works (default 1h)")
	c.Flags().BoolVar(&f.asJSON, "json", false, "print JSON")
}

// urlResponse is an answer that carries a URL.
type urlResponse interface {
	proto.Message
	GetUrl() string
}

// run asks for the URL and prints it (or the answer, with --json).
func (f *linkFlags) run(c *cobra.Command, ask func(context.Context, *client.Client) (urlResponse, error)) error {
	cl, ctx, cancel, err := dial()
	if err != nil {
		return err
	}
	defer cancel()
	resp, err := ask(ctx, cl)
	if err != nil {
		return err
	}
	if f.asJSON {
		return printJSON(c.OutOrStdout(), resp)
	}
	fmt.Fprintln(c.OutOrStdout(), resp.GetUrl())
	return nil
}

func takeoverCmd() *cobra.Command {
	var asJSON bool
	var by string
	c := &cobra.Command{
		Use:   "takeover ID",
		Short: "Hold a sandbox's screen for a person: a run's computer calls wait until handback",
		Long: `Hold a sandbox's screen for a person: while it is held, a run's computer
calls on the sandbox wait (the run logs a takeover event), and input from
the live view (reins sandbox view ID) goes through. It is handed back by
reins sandbox handback ID, when the sandbox stops or suspends, when the
service restarts, or after 15 minutes without input.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			resp, err := cl.TakeOver(ctx, args[0], by)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.OutOrStdout(), resp)
			}
			fmt.Fprintf(c.OutOrStdout(), "sandbox %s's screen is held by %s: hand it back with reins sandbox handback %s\n", args[0], resp.HeldBy, args[0])
			return nil
		},
	}
	c.Flags().StringVar(&by, "by", "", "who holds it, for the run's log (default: your tenant's name)")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func handbackCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "handback ID",
		Short: "Hand a held sandbox screen back: a waiting run's computer calls go on",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			return cl.HandBack(ctx, args[0])
		},
	}
}
