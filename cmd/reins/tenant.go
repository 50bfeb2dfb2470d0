package main

import (
	"errors"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/client"
)

func tenantCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "tenant",
		Short: "Create tenants, list them, issue their tokens (admin token only)",
		Long: `A tenant is the isolation scope of API tokens, runs and sandboxes: a
tenant's token sees only that tenant's things, and the tenant's quota bounds
how many sandboxes and unfinished runs it has at once. These commands need
the admin token (the data dir's admin.token).`,
	}
	c.AddCommand(tenantCreateCmd(), tenantLsCmd(), tenantTokenCmd(), tenantQuotaCmd(), tenantPolicyCmd())
	return group(c)
}

// quotaFlags are --max-sandboxes and --max-runs.
type quotaFlags struct{ sandboxes, runs int32 }

func (q *quotaFlags) add(c *cobra.Command) {
	c.Flags().Int32Var(&q.sandboxes, "max-sandboxes", 0, "sandboxes (not stopped) it may have at once; 0: the service's default (reins serve --tenant-max-sandboxes), -1: no limit")
	c.Flags().Int32Var(&q.runs, "max-runs", 0, "runs (not finished) it may have at once; 0: the service's default (reins serve --tenant-max-runs), -1: no limit")
}

func (q *quotaFlags) check() error {
	if q.sandboxes < -1 || q.runs < -1 {
		return usageError{errors.New("--max-sandboxes and --max-runs take a count, 0 (the service's default) or -1 (no limit)")}
	}
	return nil
}

func tenantCreateCmd() *cobra.Command {
	var q quotaFlags
	var asJSON bool
	c := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a tenant and print its name (issue its token with `reins tenant token NAME`)",
		Long: `Create a tenant and print its name. NAME is 1 to 40 lowercase letters,
digits and '-'. The tenant has no token yet: issue one with
` + "`reins tenant token NAME`" + `.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			if err := q.check(); err != nil {
				return err
			}
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			ctx, cancel := cmdContext()
			defer cancel()
			t, err := cl.CreateTenant(ctx, args[0], &reinsv1.Quota{Sandboxes: q.sandboxes, Runs: q.runs})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.OutOrStdout(), t)
			}
			fmt.Fprintln(c.OutOrStdout(), t.Name)
			return nil
		},
	}
	q.add(c)
	c.Flags().BoolVar(&asJSON, "json", false, "print the tenant as JSON")
	return c
}

func tenantLsCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List tenants with their quotas",
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			ctx, cancel := cmdContext()
			defer cancel()
			ts, err := cl.ListTenants(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSONList(c.OutOrStdout(), ts)
			}
			w := tabwriter.NewWriter(c.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tCREATED\tMAX SANDBOXES\tMAX RUNS\tTOKEN ISSUED")
			for _, t := range ts {
				token := "none: reins tenant token " + t.Name
				if t.TokenIssuedUnixNano != 0 {
					token = ago(t.TokenIssuedUnixNano)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", t.Name, ago(t.CreatedUnixNano),
					quotaString(t.Quota.GetSandboxes(), t.EffectiveQuota.GetSandboxes()),
					quotaString(t.Quota.GetRuns(), t.EffectiveQuota.GetRuns()), token)
			}
			return w.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// quotaString shows a quota as set and in effect: "10 (default)", "3",
// "no limit".
func quotaString(own, effective int32) string {
	s := fmt.Sprint(effective)
	if effective < 0 {
		s = "no limit"
	}
	if own == 0 {
		s += " (default)"
	}
	return s
}

func tenantTokenCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "token NAME",
		Short: "Issue a new token for a tenant and print it, once; its old token stops working",
		Long: `Issue a new token for a tenant and print it. The service keeps only a
hash of it, so this is the only time it is shown: hand it to the tenant as
REINS_TOKEN. The tenant's previous token stops working at once.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			ctx, cancel := cmdContext()
			defer cancel()
			tok, _, err := cl.TenantToken(ctx, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), tok)
			fmt.Fprintf(os.Stderr, "This is tenant %s's token, shown only now; its previous token no longer works.\n", args[0])
			return nil
		},
	}
}

func tenantQuotaCmd() *cobra.Command {
	var q quotaFlags
	var asJSON bool
	c := &cobra.Command{
		Use:   "quota NAME [--max-sandboxes N] [--max-runs N]",
		Short: "Change a tenant's quota (the flags given; the others stay)",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			if err := q.check(); err != nil {
				return err
			}
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			ctx, cancel := cmdContext()
			defer cancel()
			ts, err := cl.ListTenants(ctx)
			if err != nil {
				return err
			}
			var cur *reinsv1.Tenant
			for _, t := range ts {
				if t.Name == args[0] {
					cur = t
				}
			}
			if cur == nil {
				return fmt.Errorf("tenant %s not found: see reins tenant ls", args[0])
			}
			quota := &reinsv1.Quota{Sandboxes: cur.Quota.GetSandboxes(), Runs: cur.Quota.GetRuns()}
			if c.Flags().Changed("max-sandboxes") {
				quota.Sandboxes = q.sandboxes
			}
			if c.Flags().Changed("max-runs") {
				quota.Runs = q.runs
			}
			t, err := cl.SetTenantQuota(ctx, args[0], quota)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.OutOrStdout(), t)
			}
			fmt.Fprintf(c.OutOrStdout(), "%s: max sandboxes %s, max runs %s\n", t.Name,
				quotaString(t.Quota.GetSandboxes(), t.EffectiveQuota.GetSandboxes()),
				quotaString(t.Quota.GetRuns(), t.EffectiveQuota.GetRuns()))
			return nil
		},
	}
	q.add(c)
	c.Flags().BoolVar(&asJSON, "json", false, "print the tenant as JSON")
	return c
}

func tenantPolicyCmd() *cobra.Command {
	var clear bool
	c := &cobra.Command{
		Use:   "policy NAME [FILE | --clear]",
		Short: "Set a tenant's default policy (YAML or JSON), applied under each of its runs' policies",
		Args:  usageArgs(cobra.RangeArgs(1, 2)),
		RunE: func(c *cobra.Command, args []string) error {
			var text string
			switch {
			case clear && len(args) == 1:
			case !clear && len(args) == 2:
				data, err := os.ReadFile(args[1])
				if err != nil {
					return usageError{fmt.Errorf("policy file: %w", err)}
				}
				text = string(data)
			default:
				return usageError{errors.New("give a policy FILE, or --clear")}
			}
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			_, err = cl.SetTenantPolicy(ctx, args[0], text)
			return err
		},
	}
	c.Flags().BoolVar(&clear, "clear", false, "remove the tenant's default policy")
	return c
}
