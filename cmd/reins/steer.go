package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/model/script"
	"github.com/reinsdev/reins/server/wire"
)

func runsApproveCmd() *cobra.Command {
	var callID, edit string
	var always, asJSON bool
	c := &cobra.Command{
		Use:   "approve ID",
		Short: "Let a call the policy held run (--edit JSON to change its arguments, --always for the rest of the run)",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			if edit != "" && !json.Valid([]byte(edit)) {
				return usageError{errors.New("--edit must be the tool's arguments as a JSON object")}
			}
			return steer(c, args[0], asJSON, func(ctx context.Context, cl *client.Client, r *reinsv1.Run) (string, *reinsv1.PendingCall, error) {
				p := pendingCall(r, callID)
				if err := cl.Approve(ctx, r.Id, callID, edit, always); err != nil {
					return "", p, err
				}
				words := "approved " + callWords(r, p, edit)
				if always && p != nil {
					words += fmt.Sprintf(", and every later %s call of the run", p.Tool)
				}
				return words, p, nil
			})
		},
	}
	c.Flags().StringVar(&callID, "call", "", "the call to approve (default: the first pending; see runs show)")
	c.Flags().StringVar(&edit, "edit", "", "replace the call's arguments with this JSON object")
	c.Flags().BoolVar(&always, "always", false, "approve this tool for the rest of the run")
	c.Flags().BoolVar(&asJSON, "json", false, "print what was done, the call and the run as JSON")
	return c
}

func runsDenyCmd() *cobra.Command {
	var callID, reason string
	var asJSON bool
	c := &cobra.Command{
		Use:   "deny ID --reason TEXT",
		Short: "Refuse a call the policy held; the model receives the reason",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			if strings.TrimSpace(reason) == "" {
				return usageError{errors.New("--reason is required: the model reads it to choose what to do instead")}
			}
			return steer(c, args[0], asJSON, func(ctx context.Context, cl *client.Client, r *reinsv1.Run) (string, *reinsv1.PendingCall, error) {
				p := pendingCall(r, callID)
				if err := cl.Deny(ctx, r.Id, callID, reason); err != nil {
					return "", p, err
				}
				return fmt.Sprintf("denied %s (the model is told: %s)", callWords(r, p, ""), reason), p, nil
			})
		},
	}
	c.Flags().StringVar(&callID, "call", "", "the call to deny (default: the first pending)")
	c.Flags().StringVar(&reason, "reason", "", "why (given to the model)")
	c.Flags().BoolVar(&asJSON, "json", false, "print what was done, the call and the run as JSON")
	return c
}

// steer does one thing to a run and says what it did: act gets the run
// as it was (to name what it acts on) and returns the words; with asJSON
// they print as {"done": words, "call": the held call, "run": the run
// after}, each in the API's JSON.
func steer(c *cobra.Command, id string, asJSON bool, act func(context.Context, *client.Client, *reinsv1.Run) (string, *reinsv1.PendingCall, error)) error {
	cl, ctx, cancel, err := dial()
	if err != nil {
		return err
	}
	defer cancel()
	before, err := cl.GetRun(ctx, id)
	if err != nil {
		return err
	}
	words, call, err := act(ctx, cl, before)
	if err != nil {
		return err
	}
	if !asJSON {
		fmt.Fprintln(c.OutOrStdout(), words)
		return nil
	}
	after, err := cl.GetRun(ctx, id)
	if err != nil {
		return err
	}
	out := map[string]any{"done": words, "call": nil}
	for k, m := range map[string]proto.Message{"run": after, "call": call} {
		if m == nil || !m.ProtoReflect().IsValid() {
			continue
		}
		data, err := wire.JSON.Marshal(m)
		if err != nil {
			return err
		}
		out[k] = json.RawMessage(data)
	}
	enc := json.NewEncoder(c.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// pendingCall is the held call callID names, or the first ("" names it,
// as the service takes it); nil when none is held.
func pendingCall(r *reinsv1.Run, callID string) *reinsv1.PendingCall {
	for _, p := range r.Pending {
		if callID == "" || p.CallId == callID {
			return p
		}
	}
	return nil
}

// callWords names a held call: "call_0_3 of run_x: bash `rm -rf build`",
// with what an edit changes it to.
func callWords(r *reinsv1.Run, p *reinsv1.PendingCall, edit string) string {
	if p == nil {
		return "the held call of " + r.Id
	}
	name, arg := callArg(p.Tool, p.Input)
	call := p.CallId
	if !strings.HasPrefix(call, "call") { // the model's own ids (toolu_…) are named as calls
		call = "call " + call
	}
	s := fmt.Sprintf("%s of %s: %s `%s`", call, r.Id, name, summarize(arg, 1))
	if edit != "" {
		_, to := callArg(p.Tool, edit)
		s += fmt.Sprintf(", edited to `%s`", summarize(cmp.Or(to, edit), 1))
	}
	return s
}
func runsPauseCmd() *cobra.Command {
	return &cobra.Command{
		Use: "pause ID", Short: "Stop a run at its next safe point (after the current model or tool call)", Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			return cl.PauseRun(ctx, args[0])
		},
	}
}

func runsResumeCmd() *cobra.Command {
	return &cobra.Command{
		Use: "resume ID", Short: "Continue a paused run where it stopped", Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			return cl.ResumeRun(ctx, args[0])
		},
	}
}

func runsForkCmd() *cobra.Command {
	var at int64
	var model string
	var asJSON, detach bool
	c := &cobra.Command{
		Use:   "fork ID --at SEQ",
		Short: "Start a new run whose history is this run's up to event SEQ (see runs events)",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			if at <= 0 {
				return usageError{errors.New("--at SEQ is required: the last event to keep (reins runs events ID lists them)")}
			}
			model, inline, err := modelArg(model)
			if err != nil {
				return err
			}
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			run, err := cl.ForkRun(ctx, args[0], at, model, inline)
			if err != nil {
				return err
			}
			if detach {
				if asJSON {
					return printJSON(c.OutOrStdout(), run)
				}
				fmt.Fprintln(c.OutOrStdout(), run.Id)
				return nil
			}
			return watchRun(ctx, cl, run.Id, c.OutOrStdout(), asJSON)
		},
	}
	c.Flags().Int64Var(&at, "at", 0, "the last event of the original to keep")
	c.Flags().StringVar(&model, "model", "", "continue with this model instead (provider:model; a script:FILE is read here and sent)")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.Flags().BoolVarP(&detach, "detach", "d", false, "print the new run's id and return")
	return c
}

func runsReplayCmd() *cobra.Command {
	var verify, asJSON bool
	c := &cobra.Command{
		Use:   "replay ID",
		Short: "Render a run from its log (no model, tool or sandbox); --verify re-executes it and reports the first divergence",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, args []string) error {
			cl, ctx, cancel, err := dial()
			if err != nil {
				return err
			}
			defer cancel()
			if !verify {
				if asJSON {
					var evs []*reinsv1.RunEvent
					if err := cl.RunEvents(ctx, args[0], 0, false, func(ev *reinsv1.RunEvent) error { evs = append(evs, ev); return nil }); err != nil {
						return err
					}
					return printJSONList(c.OutOrStdout(), evs)
				}
				v := newRunView(c.OutOrStdout(), false)
				v.replay = true
				v.header(args[0])
				if err := cl.RunEvents(ctx, args[0], 0, false, func(ev *reinsv1.RunEvent) error { v.event(ctx, cl, args[0], ev); return nil }); err != nil {
					return err
				}
				run, err := cl.GetRun(ctx, args[0])
				if err != nil {
					return err
				}
				v.footer(run)
				return nil
			}
			vr, err := cl.VerifyRun(ctx, args[0])
			if err != nil {
				return err
			}
			if !asJSON {
				fmt.Fprintf(c.ErrOrStderr(), "verifying %s by re-executing its model responses in run %s\n", args[0], vr.Id)
			}
			werr := watchRun(ctx, cl, vr.Id, map[bool]*os.File{true: os.Stderr, false: os.Stdout}[asJSON], true)
			var ee exitError
			if werr != nil && !errors.As(werr, &ee) {
				return werr
			}
			cmp, err := cl.CompareRuns(ctx, args[0], vr.Id)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.OutOrStdout(), cmp)
			}
			if cmp.Same {
				fmt.Fprintf(c.OutOrStdout(), "verified: every tool result of %s was reproduced by %s\n", args[0], vr.Id)
				return nil
			}
			fmt.Fprintf(c.OutOrStdout(), "diverged at tool result %d (step %d, %s):\n--- recorded\n%s\n--- replayed\n%s\n",
				cmp.Index, cmp.Step, cmp.Tool, summarize(cmp.RecordedText, 20), summarize(cmp.ReplayedText, 20))
			return exitError{1}
		},
	}
	c.Flags().BoolVar(&verify, "verify", false, "re-execute the recorded model responses against a fresh sandbox and compare tool results")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// modelArg reads a script: model's file here, where the person who names
// it is, and returns the model (the path made absolute, a label only) and
// the script to send inline: the service reads no file a user names.
func modelArg(m string) (model, inline string, err error) {
	p, ok := strings.CutPrefix(strings.TrimSpace(m), "script:")
	if !ok || p == "" {
		return m, "", nil
	}
	data, err := script.ReadLocal(p)
	if err != nil {
		return "", "", fmt.Errorf("--model %s: %w", m, err)
	}
	if _, err := script.FromJSON(p, data); err != nil {
		return "", "", fmt.Errorf("--model %s: %w", m, err)
	}
	if abs, err := absPath(p); err == nil {
		p = abs
	}
	return "script:" + p, string(data), nil
}

// waitingQuestion is the ask_human question a run waits on an answer to,
// from its log; "" when it waits on none (or the log cannot be read: the
// question is then only left out of what is printed).
func waitingQuestion(ctx context.Context, cl *client.Client, r *reinsv1.Run) string {
	if r.Status != reinsv1.RunStatus_RUN_STATUS_WAITING_APPROVAL || len(r.Pending) > 0 {
		return ""
	}
	var w *reinsv1.Waiting
	cl.RunEvents(ctx, r.Id, 0, false, func(ev *reinsv1.RunEvent) error {
		switch {
		case ev.GetWaiting() != nil:
			w = ev.GetWaiting()
		case ev.GetHumanAnswer() != nil && w != nil && ev.GetHumanAnswer().CallId == w.CallId:
			w = nil
		}
		return nil
	})
	return w.GetQuestion()
}
