package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/server/wire"
)

// networkFlags are the network flags of `sandbox create`, `run` and
// `sandbox network`, as given.
type networkFlags struct {
	mode               string
	allow, deny, cidrs []string
	secrets            []string
	fs                 *pflag.FlagSet
}

// addNetworkFlags registers the network flags on fs; withSecrets adds
// --secret (a running sandbox's secrets cannot change: its environment
// holds their placeholders).
func addNetworkFlags(fs *pflag.FlagSet, withSecrets bool) *networkFlags {
	n := &networkFlags{fs: fs}
	fs.StringVar(&n.mode, "network", "", "network mode: none (loopback only), egress (only the allowed hosts, through the proxy; the default) or open (any public host, logged)")
	fs.StringArrayVar(&n.allow, "allow-host", nil, "a host the sandbox may reach, HOST or HOST:PORT; *.example.com for every name under it (repeatable)")
	fs.StringArrayVar(&n.deny, "deny-host", nil, "a host the sandbox may not reach, even in open mode (repeatable)")
	fs.StringArrayVar(&n.cidrs, "allow-cidr", nil, "addresses the sandbox may reach by address, e.g. 203.0.113.0/24 (repeatable; private ranges are the admin's to allow)")
	if withSecrets {
		fs.StringArrayVar(&n.secrets, "secret", nil, "NAME=HOST[,HOST...]: the sandbox sees $NAME as a placeholder, which the proxy replaces with the stored secret in requests to those hosts only (repeatable)")
	}
	return n
}

// rules parses the flags into rules, with the egress package's words for
// what is wrong (a usage error, before any call). The admin's bounds are
// the service's to check.
func (n *networkFlags) rules() (egress.Rules, error) {
	var r egress.Rules
	var err error
	if n.mode != "" {
		if r.Mode, err = egress.ParseMode(n.mode); err != nil {
			return r, usageError{fmt.Errorf("--network: %w", err)}
		}
	}
	if r.AllowHosts, err = wire.HostRulesFromProto(nonEmpty(n.allow)); err != nil {
		return r, usageError{fmt.Errorf("--allow-host: %w", err)}
	}
	if r.DenyHosts, err = wire.HostRulesFromProto(nonEmpty(n.deny)); err != nil {
		return r, usageError{fmt.Errorf("--deny-host: %w", err)}
	}
	if r.AllowCIDRs, err = wire.CIDRsFromProto(nonEmpty(n.cidrs)); err != nil {
		return r, usageError{fmt.Errorf("--allow-cidr: %w", err)}
	}
	for _, s := range n.secrets {
		ref, err := egress.ParseSecretRef(s)
		if err != nil {
			return r, usageError{fmt.Errorf("--secret: %w", err)}
		}
		r.Secrets = append(r.Secrets, ref)
	}
	// The admin's bounds are the service's to check; everything else is
	// caught here, before any call.
	if _, err := r.Normalize(true); err != nil {
		return r, usageError{err}
	}
	return r, nil
}

// nonEmpty drops empty values: --deny-host "" names the list and empties
// it.
func nonEmpty(vs []string) []string {
	var out []string
	for _, v := range vs {
		if strings.TrimSpace(v) != "" {
			out = append(out, v)
		}
	}
	return out
}

// spec is the flags as a spec's network, or nil when none was given (the
// service's default: egress, nothing allowed).
func (n *networkFlags) spec() (*reinsv1.Network, error) {
	r, err := n.rules()
	if err != nil || !n.any() {
		return nil, err
	}
	return wire.Network(r), nil
}

func (n *networkFlags) any() bool {
	for _, name := range []string{"network", "allow-host", "deny-host", "allow-cidr", "secret"} {
		if f := n.fs.Lookup(name); f != nil && f.Changed {
			return true
		}
	}
	return false
}

// update is the flags as an update of sandbox id: each list flag given
// replaces that list, the others are kept.
func (n *networkFlags) update(id string) (*reinsv1.UpdateNetworkRequest, error) {
	r, err := n.rules()
	if err != nil {
		return nil, err
	}
	if !n.any() {
		return nil, usageError{errors.New("nothing to change: give --network, --allow-host, --deny-host or --allow-cidr (each replaces that list; an empty value, --deny-host '', empties it)")}
	}
	req := &reinsv1.UpdateNetworkRequest{Id: id, Mode: wire.NetworkMode(r.Mode)}
	list := func(name string, items []string) *reinsv1.StringList {
		if !n.fs.Changed(name) {
			return nil
		}
		return &reinsv1.StringList{Items: items}
	}
	req.AllowHosts = list("allow-host", wire.HostRules(r.AllowHosts))
	req.DenyHosts = list("deny-host", wire.HostRules(r.DenyHosts))
	req.AllowCidrs = list("allow-cidr", wire.Network(egress.Rules{AllowCIDRs: r.AllowCIDRs}).AllowCidrs)
	return req, nil
}

// printNetwork writes a sandbox's network rules as `sandbox show` lines
// (tab-separated: the caller's tabwriter aligns them). Secrets are shown
// by name and hosts: their values are never in the rules.
func printNetwork(w io.Writer, n *reinsv1.Network) {
	mode := wire.NetworkModeFromProto(n.GetMode())
	if mode == "" {
		mode = egress.ModeEgress
	}
	fmt.Fprintf(w, "network\t%s\n", mode)
	list := func(name string, items []string) {
		if len(items) > 0 {
			fmt.Fprintf(w, "%s\t%s\n", name, strings.Join(items, ", "))
		}
	}
	list("allow hosts", n.GetAllowHosts())
	list("deny hosts", n.GetDenyHosts())
	list("allow cidrs", n.GetAllowCidrs())
	for _, s := range n.GetSecrets() {
		fmt.Fprintf(w, "secret\t%s → %s\n", s.Name, strings.Join(s.Hosts, ", "))
	}
	if mode == egress.ModeEgress && len(n.GetAllowHosts()) == 0 && len(n.GetAllowCidrs()) == 0 {
		fmt.Fprintf(w, "\t(nothing may leave: allow hosts with --allow-host HOST)\n")
	}
}

func networkCmd() *cobra.Command {
	var asJSON bool
	var n *networkFlags
	c := &cobra.Command{
		Use:   "network ID",
		Short: "Change a running sandbox's network rules, and print them",
		Long: `Change a running sandbox's network rules without restarting it, and print
the whole new rules. Each list flag given replaces that list; the lists
not named are kept: --allow-host a --allow-host b makes a and b the only
allowed hosts, and leaves the denied hosts and cidrs as they were. An
empty value empties a list (--deny-host ''). A connection already open
to a host the new rules deny is closed. Secrets are set at create time.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			req, err := n.update(args[0])
			if err != nil {
				return err
			}
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			sb, err := cl.UpdateNetwork(ctx, req)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.OutOrStdout(), sb.Spec.GetNetwork())
			}
			w := tabwriter.NewWriter(c.OutOrStdout(), 0, 0, 2, ' ', 0)
			printNetwork(w, sb.Spec.GetNetwork())
			return w.Flush()
		},
	}
	n = addNetworkFlags(c.Flags(), false)
	c.Flags().BoolVar(&asJSON, "json", false, "print the new rules as JSON")
	return c
}

func egressCmd() *cobra.Command {
	var follow, asJSON bool
	var after int64
	c := &cobra.Command{
		Use:   "egress ID",
		Short: "Print a sandbox's egress log: every connection it made, allowed or denied",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			ctx, cancel := cmdContext()
			defer cancel()
			out := c.OutOrStdout()
			if !asJSON {
				fmt.Fprint(out, egressHeader)
			}
			err = cl.EgressLog(ctx, args[0], after, follow, func(en *reinsv1.EgressLogEntry) error {
				if asJSON {
					return printJSONLine(out, en)
				}
				_, err := io.WriteString(out, egressLine(en))
				return err
			})
			if err != nil && ctx.Err() != nil {
				return nil // Ctrl-C ends a --follow
			}
			return err
		},
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new entries until the sandbox is removed")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per line, in the API's JSON form")
	c.Flags().Int64Var(&after, "after", 0, "only entries after this sequence number")
	return c
}

// The egress table has fixed columns, so that --follow prints each entry
// as it comes, aligned with the ones before.
const egressFormat = "%-23s  %-7s  %-5s  %-32s  %-21s  %8s  %8s  %s\n"

var egressHeader = fmt.Sprintf(egressFormat, "TIME", "VERDICT", "PROTO", "HOST:PORT", "ADDR", "OUT", "IN", "RULE / NOTE")

// egressZone is the time zone of the egress table (the golden tests' is
// UTC).
var egressZone = time.Local

// egressLine is one entry of the egress table.
func egressLine(en *reinsv1.EgressLogEntry) string {
	at := "-"
	if en.TimeUnixNano != 0 {
		at = time.Unix(0, en.TimeUnixNano).In(egressZone).Format("2006-01-02 15:04:05.000")
	}
	verdict := "denied"
	if en.Allowed {
		verdict = "allowed"
	}
	host := "-" // a bare address: the ADDR column has it
	if en.Host != "" {
		host = en.Host
		if en.Port != 0 {
			host = fmt.Sprintf("%s:%d", host, en.Port)
		}
	}
	addr := en.Addr
	if addr == "" {
		addr = "-"
	}
	why := en.Rule
	if en.Note != "" {
		why += "; " + en.Note
	}
	return fmt.Sprintf(egressFormat, at, verdict, en.Proto, host, addr, byteCount(en.BytesOut), byteCount(en.BytesIn), why)
}

// byteCount is a short byte count: 812, 47.1K, 3.2M.
func byteCount(n int64) string {
	switch {
	case n < 1000:
		return fmt.Sprint(n)
	case n < 1_000_000:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	case n < 1_000_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	}
	return fmt.Sprintf("%.1fG", float64(n)/1e9)
}
