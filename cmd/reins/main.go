// Command reins is the reins CLI and, with `reins serve`, the service.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox/oci"
)

// exitError carries a process exit code through cobra (exec exits with the
// command's code).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageError marks errors in how the command was called; they exit 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func main() {
	// A sandbox's shim is this binary re-executed; it never returns.
	oci.MaybeRunShim()
	err := newRoot().Execute()
	var ee exitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		os.Exit(ee.code)
	default:
		fmt.Fprintln(os.Stderr, "reins:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		// A command not found (127), a memory kill (137): what a
		// shell would exit with.
		if code, ok := errdefs.ExitCode(err); ok {
			os.Exit(code)
		}
		os.Exit(1)
	}
}

// newRoot is the whole command tree.
func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "reins",
		Short:         "Run AI agents safely: a durable agent runtime with isolated sandboxes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		// A value one of our flag types refused says why in its own
		// words: "--memory 0: give a size such as 512Mi, ...".
		var bad *pflag.InvalidValueError
		var words flagWords
		if errors.As(err, &bad) && errors.As(err, &words) {
			err = fmt.Errorf("--%s %s: %w", bad.GetFlag().Name, bad.GetValue(), words)
		}
		return usageError{fmt.Errorf("%w\nsee '%s --help'", err, c.CommandPath())}
	})
	root.AddCommand(serveCmd(), sandboxCmd(), snapshotCmd(), templateCmd(), imageCmd(), runCmd(), runsCmd(), tenantCmd(), secretCmd(), versionCmd(), mcpCmd())
	group(root)
	resolveIDs(root)
	return root
}

// usageArgs marks an argument-count error as a usage error.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if err := check(c, args); err != nil {
			return usageError{fmt.Errorf("%w\nsee '%s --help'", err, c.CommandPath())}
		}
		return nil
	}
}

// version is set by the build (-ldflags "-X main.version=...").
var version = "dev"

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, and the service's with its runtimes if it is reachable",
		Args:  usageArgs(cobra.NoArgs),
		Run: func(c *cobra.Command, _ []string) {
			out := c.OutOrStdout()
			fmt.Fprintln(out, "reins", version)
			cl, err := client.FromEnv()
			if err != nil {
				return // no token: the client's version is all there is to say
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			v, err := cl.Version(ctx)
			if err != nil {
				fmt.Fprintf(c.ErrOrStderr(), "server at %s: %v\n", cl.URL, err)
				return
			}
			fmt.Fprintf(out, "server %s at %s\n", v.Version, cl.URL)
			w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			for _, b := range v.Backends {
				fmt.Fprintf(w, "  %s\t%s\n", b.Name, b.Runtime)
			}
			w.Flush()
		},
	}
}

// dial returns a client of the service (REINS_URL, REINS_TOKEN) and a
// context that Ctrl-C cancels.
func dial() (*client.Client, context.Context, context.CancelFunc, error) {
	cl, err := client.FromEnv()
	if err != nil {
		return nil, nil, func() {}, err
	}
	ctx, cancel := cmdContext()
	return cl, ctx, cancel, nil
}

// group makes a command whose job is to hold subcommands refuse an unknown
// one as a usage error (cobra would print help and exit 0).
func group(c *cobra.Command) *cobra.Command {
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(c *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageError{fmt.Errorf("unknown command %q for %q\nsee '%s --help'", args[0], c.CommandPath(), c.CommandPath())}
		}
		return c.Help()
	}
	return c
}
