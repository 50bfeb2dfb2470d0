package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func secretCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "secret",
		Short: "Set, list and remove secrets, which the egress proxy puts into a sandbox's requests",
		Long: `A secret is a value kept sealed by the service (never in a sandbox). A
sandbox created with --secret NAME=HOST sees NAME set to a placeholder, and
the service's egress proxy swaps the placeholder for the value in requests
to those hosts only. No command shows a value again.

Secrets belong to the token's scope: a tenant's token works on the tenant's
secrets, the admin token on the admin's own (not on any tenant's).`,
	}
	c.AddCommand(secretSetCmd(), secretLsCmd(), secretRmCmd())
	return group(c)
}

// maxSecretInput bounds what `secret set` reads from stdin: well over the
// service's limit on a value (16 KiB), which the service then names.
const maxSecretInput = 1 << 20

func secretSetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "set NAME",
		Short: "Store a secret, its value read from stdin (replacing any value it had)",
		Long: `Store the secret NAME, replacing any value it had. The value is read from
stdin: on a terminal it is asked for without echo; from a pipe or a file it
is everything read, less exactly one trailing newline ("\n"; a "\r" before
it is kept, and so is any other newline), so both of these store "s3cret":

  printf 's3cret' | reins secret set API_TOKEN
  echo s3cret | reins secret set API_TOKEN

NAME is an environment variable's name: letters, digits and '_', not
starting with a digit, at most 128 bytes. A value is 1 byte to 16 KiB.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			value, err := secretValue(os.Stdin, c.ErrOrStderr(), args[0])
			if err != nil {
				return err
			}
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			s, err := cl.SetSecret(ctx, args[0], value)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.ErrOrStderr(), "secret %s set (%s)\n", s.GetName(), humanBytes(s.GetSize()))
			return nil
		},
	}
}

// secretValue reads a secret's value: without echo from a terminal, else
// all of in less one trailing newline.
func secretValue(in *os.File, prompt io.Writer, name string) ([]byte, error) {
	if fd := int(in.Fd()); term.IsTerminal(fd) {
		fmt.Fprintf(prompt, "Value of secret %s (not shown): ", name)
		v, err := term.ReadPassword(fd)
		fmt.Fprintln(prompt)
		if err != nil {
			return nil, fmt.Errorf("reading the value from the terminal: %w", err)
		}
		return v, nil
	}
	return readSecretValue(in)
}

func readSecretValue(r io.Reader) ([]byte, error) {
	v, err := io.ReadAll(io.LimitReader(r, maxSecretInput+1))
	if err != nil {
		return nil, fmt.Errorf("reading the value from stdin: %w", err)
	}
	if len(v) > maxSecretInput {
		return nil, usageError{errors.New("stdin holds more than 1 MiB: a secret's value is at most 16 KiB")}
	}
	v, _ = bytes.CutSuffix(v, []byte("\n"))
	return v, nil
}

func secretLsCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the secrets of this token's scope: names, sizes, dates (never values)",
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			list, err := cl.ListSecrets(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSONList(c.OutOrStdout(), list)
			}
			if len(list) == 0 {
				fmt.Fprintln(c.ErrOrStderr(), "no secrets: store one with `reins secret set NAME`")
				return nil
			}
			w := tabwriter.NewWriter(c.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tSIZE\tUPDATED\tCREATED")
			for _, s := range list {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", s.Name, humanBytes(s.Size), ago(s.UpdatedUnixNano), ago(s.CreatedUnixNano))
			}
			return w.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func secretRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME",
		Aliases: []string{"delete"},
		Short:   "Remove a secret",
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			return cl.DeleteSecret(ctx, args[0])
		},
	}
}
