package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/sandbox"
	"github.com/reinsdev/reins/server/wire"
)

func sandboxCmd() *cobra.Command {
	c := &cobra.Command{
		Use:     "sandbox",
		Aliases: []string{"sb"},
		Short:   "Create, use and remove sandboxes",
	}
	c.AddCommand(createCmd(), lsCmd(), showCmd(), execCmd(), psCmd(), logsCmd(), killCmd(), cpCmd(), portCmd(), rmCmd(),
		viewCmd(), takeoverCmd(), handbackCmd(),
		networkCmd(), egressCmd(), extendCmd(), suspendCmd(), resumeCmd(), pauseCmd(), snapshotSandboxCmd(), forkCmd(), eventsCmd(),
		computerCmd())
	return group(c)
}

// cmdContext is cancelled by Ctrl-C or SIGTERM.
func cmdContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// kvFlag collects repeated K=V flags.
type kvFlag struct{ v []string }

func (f *kvFlag) String() string { return strings.Join(f.v, ",") }
func (f *kvFlag) Type() string   { return "K=V" }
func (f *kvFlag) Set(s string) error {
	if k, _, ok := strings.Cut(s, "="); !ok || k == "" {
		return fmt.Errorf("%q is not KEY=VALUE", s)
	}
	f.v = append(f.v, s)
	return nil
}
func (f *kvFlag) Map() map[string]string {
	m := map[string]string{}
	for _, kv := range f.v {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

func createCmd() *cobra.Command {
	var (
		spec        reinsv1.SandboxSpec
		mem, disk   sizeFlag
		cpus        cpuFlag
		ttl, idle   time.Duration
		warning     time.Duration
		env, labels kvFlag
		asJSON      bool
		network     *networkFlags
		gw          bool
		gwModel     string
		onExpire    string
	)
	c := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox and print its id",
		Long: `Create a sandbox and print its id.

Defaults: image busybox, backend gvisor, 1 CPU, 1 GiB memory, 4096 pids,
4 GiB disk, no TTL, no idle timeout. A TTL or idle timeout that runs out
suspends the sandbox: its workspace is saved and its guest deleted, ls
shows it suspended (ttl_expired or idle_timeout), and reins sandbox resume
brings it back. With --on-expire delete it is stopped for good instead,
shown with that reason. --image snapshot:NAME starts from a snapshot.

Network: by default a sandbox may reach nothing (egress mode with an
empty allowlist); --allow-host names what it may reach, through the
service's egress proxy, and every connection is logged (reins sandbox
egress ID). --network none leaves it loopback only; --network open lets
it reach any public host, still through the proxy and logged.

Model gateway: --model-gateway lets programs in the sandbox (Claude Code,
Codex, the model SDKs) call models through the service, which holds the
keys: the sandbox gets ANTHROPIC_BASE_URL, OPENAI_BASE_URL and the key
variables set to the gateway on its loopback (127.0.0.1:47070) and to a
placeholder token good only from this sandbox. --model sends every call
to that model (provider:model, or script:FILE, read here and sent);
without it each call goes to the provider of its wire format. It works
with every --network, none included.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			if ttl < 0 || idle < 0 || warning < 0 {
				return usageError{errors.New("--ttl, --idle-timeout and --expiry-warning must not be negative")}
			}
			var err error
			if spec.Network, err = network.spec(); err != nil {
				return err
			}
			if spec.Gateway, err = gatewayArg(gw, gwModel); err != nil {
				return err
			}
			if spec.OnExpire, err = onExpireArg(onExpire); err != nil {
				return err
			}
			if spec.Screen != "" {
				if _, _, err := sandbox.ParseScreen(spec.Screen); err != nil {
					return usageError{fmt.Errorf("--screen: %w", err)}
				}
			}
			cl, err := client.FromEnv()
			if err != nil {
				return err
			}
			spec.MemoryBytes, spec.DiskBytes, spec.Cpus = mem.v, disk.v, cpus.v
			spec.TtlMs, spec.IdleTimeoutMs = ttl.Milliseconds(), idle.Milliseconds()
			spec.ExpiryWarningMs = warning.Milliseconds()
			spec.Env, spec.Labels = env.v, labels.Map()
			ctx, cancel := cmdContext()
			defer cancel()
			bar := newStatusLine(os.Stderr)
			sb, err := cl.Create(ctx, &spec, bar.Progress)
			bar.Done()
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.OutOrStdout(), sb)
			}
			fmt.Fprintln(c.OutOrStdout(), sb.Id)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&spec.Image, "image", "", "image: busybox, debian, an OCI reference, oci:PATH, docker-archive:PATH or snapshot:NAME (default busybox)")
	f.StringVar(&spec.Backend, "backend", "", "isolation backend: gvisor or runc (default gvisor)")
	f.Var(&cpus, "cpus", "CPUs, e.g. 0.5, 2 or 500m (millicores)")
	f.Var(&mem, "memory", "memory limit, e.g. 512Mi, 2Gi (512M: M is MiB, as docker's)")
	f.Int64Var(&spec.Pids, "pids", 0, "maximum number of processes")
	f.Var(&disk, "disk", "size of the writable disk, e.g. 10Gi")
	durationVar(f, &ttl, "ttl", 0, "expire the sandbox after this long, e.g. 30m (see --on-expire)")
	durationVar(f, &idle, "idle-timeout", 0, "expire the sandbox after this long without activity (see --on-expire)")
	durationVar(f, &warning, "expiry-warning", 0, "send the expiring event this long before the TTL runs out (default: the service's, 1m)")
	f.StringVar(&onExpire, "on-expire", "", "what an expiry does: suspend (the default: the workspace is kept, resume brings it back) or delete")
	f.VarP(&env, "env", "e", "environment variable K=V (repeatable)")
	f.VarP(&labels, "label", "l", "label K=V (repeatable)")
	f.StringVarP(&spec.Workdir, "workdir", "w", "", "working directory of commands (default the image's, or /workspace)")
	f.StringVar(&spec.Screen, "screen", "", "a desktop image's screen size, WxH (default the image's: 1280x800 for desktop)")
	f.BoolVar(&asJSON, "json", false, "print the sandbox as JSON")
	f.BoolVar(&gw, "model-gateway", false, "let programs in the sandbox call models through the service, never holding a key")
	f.StringVar(&gwModel, "model", "", "with --model-gateway: send every call to this model (provider:model; a script:FILE is read here and sent)")
	network = addNetworkFlags(f, true)
	return c
}

// gatewayArg is the model gateway --model-gateway and --model ask for.
func gatewayArg(on bool, m string) (*reinsv1.ModelGateway, error) {
	if !on {
		if m != "" {
			return nil, usageError{errors.New("--model needs --model-gateway: it is where the gateway sends the sandbox's model calls")}
		}
		return nil, nil
	}
	m, inline, err := modelArg(m)
	if err != nil {
		return nil, err
	}
	return &reinsv1.ModelGateway{On: true, Model: m, Script: inline}, nil
}

// printGateway prints a sandbox's model gateway, if it has one.
func printGateway(w io.Writer, g *reinsv1.ModelGateway) {
	switch {
	case !g.GetOn():
	case g.Model == "":
		fmt.Fprintln(w, "gateway\ton (each call to the provider of its wire format)")
	default:
		fmt.Fprintf(w, "gateway\ton (model %s)\n", g.Model)
	}
}

func lsCmd() *cobra.Command {
	var labels kvFlag
	var asJSON, quiet, all bool
	c := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List sandboxes (stopped ones too with --all)",
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			sbs, err := listSandboxes(labels)
			if err != nil {
				return err
			}
			if !all {
				sbs = slices.DeleteFunc(sbs, stopped)
			}
			switch {
			case asJSON:
				return printJSONList(c.OutOrStdout(), sbs)
			case quiet:
				for _, sb := range sbs {
					fmt.Fprintln(c.OutOrStdout(), sb.Id)
				}
				return nil
			}
			w := tabwriter.NewWriter(c.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tIMAGE\tBACKEND\tSTATE\tCREATED\tLABELS\tREASON")
			for _, sb := range sbs {
				reason := sandboxReasonName(sb.Reason)
				if sb.State == reinsv1.SandboxState_SANDBOX_STATE_SUSPENDED {
					reason = sandboxReasonName(sb.SuspendedReason)
				}
				if sb.Message != "" {
					reason += ": " + sb.Message
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sb.Id, sb.Spec.Image, sb.Spec.Backend, sandboxStateName(sb.State),
					ago(sb.CreatedUnixNano), labelString(sb.Spec.Labels), reason)
			}
			return w.Flush()
		},
	}
	f := c.Flags()
	f.VarP(&labels, "label", "l", "only sandboxes with this label K=V (repeatable: all must match)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.BoolVarP(&quiet, "quiet", "q", false, "print only the ids")
	f.BoolVarP(&all, "all", "a", false, "list stopped sandboxes too")
	return c
}

// listSandboxes lists the caller's sandboxes with every label given.
func listSandboxes(labels kvFlag) ([]*reinsv1.Sandbox, error) {
	cl, ctx, cancel, err := dial()
	if err != nil {
		return nil, err
	}
	defer cancel()
	return cl.List(ctx, labels.Map())
}

// stopped says whether a sandbox has ended for good (ls leaves these out
// unless --all, as docker ps leaves out exited containers).
func stopped(sb *reinsv1.Sandbox) bool { return sb.State == reinsv1.SandboxState_SANDBOX_STATE_STOPPED }

func showCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "show ID",
		Short: "Show one sandbox",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			sb, err := cl.Get(ctx, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.OutOrStdout(), sb)
			}
			w := tabwriter.NewWriter(c.OutOrStdout(), 0, 0, 2, ' ', 0)
			s := sb.Spec
			fmt.Fprintf(w, "id\t%s\nstate\t%s\n", sb.Id, sandboxStateName(sb.State))
			if sb.Reason != reinsv1.SandboxReason_SANDBOX_REASON_UNSPECIFIED {
				fmt.Fprintf(w, "reason\t%s: %s\n", sandboxReasonName(sb.Reason), sb.Message)
			}
			if sb.State == reinsv1.SandboxState_SANDBOX_STATE_SUSPENDED {
				fmt.Fprintf(w, "suspended\t%s (reins sandbox resume %s brings it back)\n",
					cmp.Or(sandboxReasonName(sb.SuspendedReason), "on request"), sb.Id)
			}
			if sb.Origin != "" {
				fmt.Fprintf(w, "origin\t%s\n", sb.Origin)
			}
			if sb.Workspace != "" {
				fmt.Fprintf(w, "workspace\t%s\n", sb.Workspace)
			}
			fmt.Fprintf(w, "image\t%s %s\nbackend\t%s\ncpus\t%g\nmemory\t%s\npids\t%d\ndisk\t%s\ncreated\t%s\n",
				s.Image, sb.ImageDigest, s.Backend, s.Cpus, sandbox.FormatBytes(s.MemoryBytes), s.Pids,
				sandbox.FormatBytes(s.DiskBytes), ago(sb.CreatedUnixNano))
			fmt.Fprintf(w, "workdir\t%s\n", cmp.Or(s.Workdir, "the image's (/workspace unless it names one)"))
			if used := memoryUsed(sb); used != "" {
				fmt.Fprintf(w, "memory used\t%s\n", used)
			}
			if sb.Runtime != "" {
				fmt.Fprintf(w, "runtime\t%s\n", sb.Runtime)
			}
			if sb.Screen != "" {
				fmt.Fprintf(w, "screen\t%s\n", sb.Screen)
			}
			if sb.HeldBy != "" {
				fmt.Fprintf(w, "held by\t%s (its runs' computer calls wait: reins sandbox handback %s)\n", sb.HeldBy, sb.Id)
			}
			if sb.ExpiresUnixNano != 0 {
				then := "suspended (--on-expire suspend)"
				switch {
				case sb.State == reinsv1.SandboxState_SANDBOX_STATE_SUSPENDED:
					then = "deleted with its workspace unless resumed or extended"
				case s.OnExpire == reinsv1.ExpireAction_EXPIRE_ACTION_DELETE:
					then = "stopped (--on-expire delete)"
				}
				fmt.Fprintf(w, "expires\t%s, then %s\n", expiryWords(sb, time.Now()), then)
			}
			printSandboxEnv(w, sb)
			if sb.State == reinsv1.SandboxState_SANDBOX_STATE_RUNNING {
				printUsage(ctx, w, cl.Sandbox(sb.Id), memoryUsed(sb) != "")
			}
			if s.IdleTimeoutMs != 0 {
				fmt.Fprintf(w, "idle timeout\t%s\n", time.Duration(s.IdleTimeoutMs)*time.Millisecond)
			}
			if len(s.Labels) > 0 {
				fmt.Fprintf(w, "labels\t%s\n", labelString(s.Labels))
			}
			if sb.OomKills > 0 {
				fmt.Fprintf(w, "oom kills\t%d\n", sb.OomKills)
			}
			printNetwork(w, s.GetNetwork())
			printGateway(w, s.GetGateway())
			return w.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// memoryUsed says what a sandbox uses of its memory limit: "312 MiB now,
// peak 1.2 GiB (59% of the limit)"; "" when not measured.
func memoryUsed(sb *reinsv1.Sandbox) string {
	var parts []string
	if sb.MemoryBytes > 0 {
		parts = append(parts, sandbox.FormatBytes(int64(sb.MemoryBytes))+" now")
	}
	if p := sb.PeakMemoryBytes; p > 0 {
		s := "peak " + sandbox.FormatBytes(int64(p))
		if limit := sb.GetSpec().GetMemoryBytes(); limit > 0 {
			s += fmt.Sprintf(" (%d%% of the limit)", int64(p)*100/limit)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

func portCmd() *cobra.Command {
	var f linkFlags
	c := &cobra.Command{
		Use:   "port ID PORT",
		Short: "Print a URL on the service that reaches PORT inside the sandbox (HTTP, WebSocket)",
		Long: `Print a URL on the service that reaches a TCP port inside the sandbox,
through its executor (no host port is opened). Opening it needs your token
(as "Authorization: Bearer TOKEN" or a reins_token cookie), unless --public
makes it a signed link anyone may open until it expires (--ttl, default 1h,
at most 168h).`,
		Args: usageArgs(cobra.ExactArgs(2)),
		RunE: func(c *cobra.Command, args []string) error {
			port, err := strconv.Atoi(args[1])
			if err != nil || port < 1 || port > 65535 {
				return usageError{fmt.Errorf("port %q: give a number from 1 to 65535", args[1])}
			}
			return f.run(c, func(ctx context.Context, cl *client.Client) (urlResponse, error) {
				return cl.PortURL(ctx, args[0], port, f.public, f.ttl)
			})
		},
	}
	f.add(c)
	return c
}

func rmCmd() *cobra.Command {
	var labels kvFlag
	var all bool
	c := &cobra.Command{
		Use:     "rm ID...",
		Aliases: []string{"remove", "delete"},
		Short:   "Stop sandboxes and remove everything they had (--all: every one of yours; --label K=V: those labelled so)",
		Long: `Stop sandboxes and remove everything they had: give their ids, or
--all for every sandbox of yours (stopped ones too), or --label K=V for
those with the label (repeatable: all must match). Prints each id removed,
then how many.`,
		Args: usageArgs(cobra.ArbitraryArgs),
		RunE: func(c *cobra.Command, args []string) error {
			bulk := all || len(labels.v) > 0
			switch {
			case bulk && len(args) > 0:
				return usageError{errors.New("give ids, or --all or --label, not both")}
			case !bulk && len(args) == 0:
				return usageError{errors.New("rm needs the ids of the sandboxes to remove, or --all, or --label K=V")}
			}
			if !bulk {
				return removeEach(c, "sandbox", args, false, (*client.Client).Delete)
			}
			sbs, err := listSandboxes(labels)
			if err != nil {
				return err
			}
			ids := make([]string, len(sbs))
			for i, sb := range sbs {
				ids[i] = sb.Id
			}
			return removeEach(c, "sandbox", ids, true, (*client.Client).Delete)
		},
	}
	c.Flags().BoolVarP(&all, "all", "a", false, "remove every sandbox of yours")
	c.Flags().VarP(&labels, "label", "l", "remove the sandboxes with this label K=V (repeatable: all must match)")
	return c
}

func extendCmd() *cobra.Command {
	var ttl time.Duration
	var asJSON bool
	c := &cobra.Command{
		Use:   "extend ID --ttl DUR",
		Short: "Set a running or suspended sandbox's expiry to DUR from now (sooner or later)",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			if ttl <= 0 {
				return usageError{errors.New("extend needs --ttl DUR, the time from now until the sandbox expires, e.g. --ttl 30m")}
			}
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			sb, err := cl.Extend(ctx, args[0], ttl)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.OutOrStdout(), sb)
			}
			fmt.Fprintf(c.OutOrStdout(), "%s expires at %s (in %s)\n", sb.Id,
				time.Unix(0, sb.ExpiresUnixNano).Format(time.RFC3339), ttl)
			return nil
		},
	}
	durationVar(c.Flags(), &ttl, "ttl", 0, "time from now until the sandbox expires")
	c.Flags().BoolVar(&asJSON, "json", false, "print the sandbox as JSON")
	return c
}

func psCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "ps ID",
		Short: "List the processes started in a sandbox",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			sb := cl.Sandbox(args[0])
			resp, err := client.Unary(ctx, sb, sb.RPC().ListProcesses, &executorv1.ListProcessesRequest{})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.OutOrStdout(), resp)
			}
			w := tabwriter.NewWriter(c.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "PID\tSTATUS\tSTARTED\tTAG\tCOMMAND")
			for _, p := range resp.Processes {
				status := "running"
				if !p.Running && p.Exited != nil {
					status = fmt.Sprintf("%s (%d)", p.Exited.Reason, p.Exited.ExitCode)
				}
				fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\n", p.Pid, status, ago(p.StartedUnixNano), p.Tag, strings.Join(p.Argv, " "))
			}
			return w.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func logsCmd() *cobra.Command {
	var follow bool
	c := &cobra.Command{
		Use:   "logs ID TAG|PID",
		Short: "Print a process's output (kept in a bounded buffer); name it by its exec --tag or its PID",
		Args:  usageArgs(cobra.ExactArgs(2)),
		RunE: func(c *cobra.Command, args []string) error {
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			sb := cl.Sandbox(args[0])
			pid, err := processArg(ctx, sb, args[1])
			if err != nil {
				return err
			}
			var out output
			_, err = sb.Attach(ctx, pid, follow, func(ev *executorv1.ExecEvent) {
				switch e := ev.Event.(type) {
				case *executorv1.ExecEvent_Stdout:
					out.write(c.OutOrStdout(), e.Stdout)
				case *executorv1.ExecEvent_Stderr:
					out.write(c.ErrOrStderr(), e.Stderr)
				case *executorv1.ExecEvent_Dropped:
					out.dropped(c.ErrOrStderr(), e.Dropped)
				}
			})
			if err != nil {
				return err
			}
			return out.err()
		},
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing output until the process exits")
	return c
}

func killCmd() *cobra.Command {
	var sig string
	c := &cobra.Command{
		Use:   "kill ID TAG|PID",
		Short: "Send a signal to a process's group (default KILL); name it by its exec --tag or its PID",
		Args:  usageArgs(cobra.ExactArgs(2)),
		RunE: func(c *cobra.Command, args []string) error {
			num, err := parseSignal(sig)
			if err != nil {
				return usageError{err}
			}
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			sb := cl.Sandbox(args[0])
			pid, err := processArg(ctx, sb, args[1])
			if err != nil {
				return err
			}
			_, err = client.Unary(ctx, sb, sb.RPC().Signal, &executorv1.SignalRequest{Pid: pid, Signal: int32(num)})
			return err
		},
	}
	c.Flags().StringVarP(&sig, "signal", "s", "KILL", "signal name or number (TERM, INT, HUP, 9, ...)")
	return c
}

// processArg is the process a logs or kill argument names: a PID, or the
// tag it was started with (exec --tag), as ps lists them. A tag several
// processes share names the one running, if only one is.
func processArg(ctx context.Context, sb *client.Sandbox, arg string) (int32, error) {
	if pid, ok := parsePid(arg); ok {
		return pid, nil
	}
	resp, err := client.Unary(ctx, sb, sb.RPC().ListProcesses, &executorv1.ListProcessesRequest{})
	if err != nil {
		return 0, err
	}
	return pickProcess(resp.Processes, arg)
}

func pickProcess(procs []*executorv1.ProcessInfo, tag string) (int32, error) {
	var tagged, running []*executorv1.ProcessInfo
	for _, p := range procs {
		if p.Tag == tag && tag != "" {
			tagged = append(tagged, p)
			if p.Running {
				running = append(running, p)
			}
		}
	}
	switch {
	case len(tagged) == 1:
		return tagged[0].Pid, nil
	case len(running) == 1:
		return running[0].Pid, nil
	case len(tagged) == 0:
		return 0, usageError{fmt.Errorf("%q is neither a PID nor the tag of a process here: give the PID or the --tag that exec --detach was given (reins sandbox ps ID lists both)", tag)}
	}
	pids := make([]string, len(tagged))
	for i, p := range tagged {
		pids[i] = fmt.Sprint(p.Pid)
	}
	return 0, usageError{fmt.Errorf("tag %q names %d processes (PIDs %s): give the PID", tag, len(tagged), strings.Join(pids, ", "))}
}

func parsePid(s string) (int32, bool) {
	var pid int32
	if _, err := fmt.Sscanf(s, "%d", &pid); err != nil || pid <= 0 || fmt.Sprint(pid) != s {
		return 0, false
	}
	return pid, true
}

var signals = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "KILL": syscall.SIGKILL,
	"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "TERM": syscall.SIGTERM, "STOP": syscall.SIGSTOP,
	"CONT": syscall.SIGCONT, "ALRM": syscall.SIGALRM, "WINCH": syscall.SIGWINCH,
}

func parseSignal(s string) (syscall.Signal, error) {
	u := strings.TrimPrefix(strings.ToUpper(s), "SIG")
	if sig, ok := signals[u]; ok {
		return sig, nil
	}
	var n int
	if _, err := fmt.Sscanf(s, "%d", &n); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), nil
	}
	names := make([]string, 0, len(signals))
	for k := range signals {
		names = append(names, k)
	}
	sort.Strings(names)
	return 0, fmt.Errorf("--signal %q is not a signal: use a number or one of %s", s, strings.Join(names, ", "))
}

func labelString(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

func ago(nano int64) string {
	if nano == 0 {
		return "-"
	}
	d := time.Since(time.Unix(0, nano)).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// printJSON prints m in the API's own JSON form (wire.JSON), so --json
// prints what curl reads, indented.
func printJSON(w io.Writer, m proto.Message) error {
	data, err := wire.JSON.Marshal(m)
	if err != nil {
		return err
	}
	// As raw JSON the fields keep the .proto's order.
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(json.RawMessage(data))
}

// printJSONLine prints m as one line of JSON (for a stream: one object a
// line), the same object printJSON prints.
func printJSONLine(w io.Writer, m proto.Message) error {
	data, err := wire.JSON.Marshal(m) // compact: one line
	if err != nil {
		return err
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

func printJSONList[T proto.Message](w io.Writer, items []T) error {
	out := make([]json.RawMessage, 0, len(items))
	for _, it := range items {
		data, err := wire.JSON.Marshal(it)
		if err != nil {
			return err
		}
		out = append(out, data)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
