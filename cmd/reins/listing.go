package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/reinsdev/reins/client"
)

// listCmd is an `ls [--json]` command: list (a method of the client,
// (*client.Client).ListTemplates) fetches the items, which
// print as JSON with --json, or else as a table of header and a row each
// (tab-separated cells).
func listCmd[T proto.Message](short, header string, list func(*client.Client, context.Context) ([]T, error), row func(T) string) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   short,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			items, err := list(cl, ctx)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSONList(c.OutOrStdout(), items)
			}
			return printTable(c.OutOrStdout(), header, items, row)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func printTable[T any](out io.Writer, header string, items []T, row func(T) string) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, header)
	for _, it := range items {
		fmt.Fprintln(w, row(it))
	}
	return w.Flush()
}

// removeCmd is an `rm NAME...` command (use says what it takes) that
// removes each with del (removeEach).
func removeCmd(use, short, what string, del func(*client.Client, context.Context, string) error) *cobra.Command {
	return &cobra.Command{
		Use:     use,
		Aliases: []string{"remove", "delete"},
		Short:   short,
		Args:    usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			return removeEach(c, what, args, false, del)
		},
	}
}
