package mcp

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/sandbox"
)

type createArgs struct {
	Image      string            `json:"image,omitempty" jsonschema:"the image: busybox (the default), debian, python, node, agents, desktop, snapshot:NAME or template:NAME"`
	Memory     string            `json:"memory,omitempty" jsonschema:"memory limit, such as 512M or 2G (default: the service's)"`
	CPUs       float64           `json:"cpus,omitempty" jsonschema:"CPUs, such as 0.5 or 2 (default: the service's)"`
	TTL        string            `json:"ttl,omitempty" jsonschema:"how long the sandbox lives, such as 30m or 2h (default: no limit)"`
	Network    string            `json:"network,omitempty" jsonschema:"none (loopback only), egress (the default: out only to allow_hosts, through the proxy) or open (any public host)"`
	AllowHosts []string          `json:"allow_hosts,omitempty" jsonschema:"hosts the sandbox may reach in egress mode, such as pypi.org or *.github.com:443"`
	Labels     map[string]string `json:"labels,omitempty" jsonschema:"labels to find the sandbox by (sandbox_list)"`
	Env        map[string]string `json:"env,omitempty" jsonschema:"environment variables of every command in the sandbox"`
	Workdir    string            `json:"workdir,omitempty" jsonschema:"the working directory of commands (default: the image's)"`
}

type listArgs struct {
	Labels map[string]string `json:"labels,omitempty" jsonschema:"only the sandboxes that carry every one of these labels"`
}

type idArgs struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id, as sandbox_create answered it"`
}

type portArgs struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Port      int    `json:"port" jsonschema:"the port a program in the sandbox listens on (1-65535)"`
	Public    bool   `json:"public,omitempty" jsonschema:"a signed link anyone may open until it expires, instead of one that needs the reins token"`
	TTL       string `json:"ttl,omitempty" jsonschema:"how long a public link works, such as 1h (default 1h)"`
}

func (t *tools) addSandboxTools(s *sdk.Server) {
	sdk.AddTool(s, &sdk.Tool{
		Name:        "sandbox_create",
		Description: "Make a new isolated sandbox and answer its sandbox_id, which every other tool takes.",
		Annotations: &sdk.ToolAnnotations{Title: "Create a sandbox", DestructiveHint: boolp(false), OpenWorldHint: boolp(false)},
	}, t.create)
	sdk.AddTool(s, &sdk.Tool{
		Name:        "sandbox_list",
		Description: "List your sandboxes (id, state, image, labels).",
		Annotations: &sdk.ToolAnnotations{Title: "List sandboxes", ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: boolp(false)},
	}, t.list)
	sdk.AddTool(s, &sdk.Tool{
		Name:        "sandbox_delete",
		Description: "Stop a sandbox and delete everything in it.",
		Annotations: &sdk.ToolAnnotations{Title: "Delete a sandbox", DestructiveHint: boolp(true), IdempotentHint: true, OpenWorldHint: boolp(false)},
	}, t.delete)
	sdk.AddTool(s, &sdk.Tool{
		Name:        "port_url",
		Description: "Answer a URL that reaches a port a program in the sandbox listens on (a web server, a notebook).",
		Annotations: &sdk.ToolAnnotations{Title: "URL of a sandbox port", ReadOnlyHint: true, OpenWorldHint: boolp(false)},
	}, t.portURL)
}

// specOf turns create's arguments into a sandbox spec, naming the argument
// that is wrong.
func specOf(a createArgs) (*reinsv1.SandboxSpec, error) {
	spec := &reinsv1.SandboxSpec{Image: a.Image, Cpus: a.CPUs, Labels: a.Labels, Workdir: a.Workdir}
	if a.CPUs < 0 {
		return nil, argError("cpus", "%v is negative: give a number of CPUs such as 0.5 or 2", a.CPUs)
	}
	if a.Memory != "" {
		n, err := sandbox.ParseBytes(a.Memory)
		if err != nil || n == 0 {
			return nil, argError("memory", "%q is not a size: write a number with a unit, such as 512M or 2G", a.Memory)
		}
		spec.MemoryBytes = n
	}
	if a.TTL != "" {
		d, err := parseDuration(a.TTL)
		if err != nil {
			return nil, argError("ttl", "%v", err)
		}
		spec.TtlMs = d.Milliseconds()
	}
	for _, k := range slices.Sorted(maps.Keys(a.Env)) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, argError("env", "the name %q is not a variable name", k)
		}
		spec.Env = append(spec.Env, k+"="+a.Env[k])
	}
	mode := reinsv1.NetworkMode_NETWORK_MODE_UNSPECIFIED
	switch a.Network {
	case "":
	case "none":
		mode = reinsv1.NetworkMode_NETWORK_MODE_NONE
	case "egress":
		mode = reinsv1.NetworkMode_NETWORK_MODE_EGRESS
	case "open":
		mode = reinsv1.NetworkMode_NETWORK_MODE_OPEN
	default:
		return nil, argError("network", "%q is not a mode: give none, egress or open", a.Network)
	}
	if mode != reinsv1.NetworkMode_NETWORK_MODE_UNSPECIFIED || len(a.AllowHosts) > 0 {
		spec.Network = &reinsv1.Network{Mode: mode, AllowHosts: a.AllowHosts}
	}
	return spec, nil
}

// parseDuration reads "30m", "2h"; a bare number is refused with the
// guess a person would make.
func parseDuration(s string) (time.Duration, error) {
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return 0, fmt.Errorf("%q has no unit: did you mean %ss?", s, s)
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a duration: write one such as 90s, 30m or 2h", s)
	}
	return d, nil
}

func (t *tools) create(ctx context.Context, req *sdk.CallToolRequest, a createArgs) (*sdk.CallToolResult, any, error) {
	spec, err := specOf(a)
	if err != nil {
		return nil, nil, err
	}
	progress := progressOf(ctx, req)
	sb, err := t.c.Create(ctx, spec, func(p *reinsv1.Progress) { progress(progressText(p)) })
	if err != nil {
		return nil, nil, err
	}
	js, err := protoJSON(sb)
	if err != nil {
		return nil, nil, err
	}
	img := sb.GetSpec().GetImage()
	return result(fmt.Sprintf("sandbox %s is running (image %s); pass sandbox_id %q to the other tools", sb.GetId(), img, sb.GetId()), js), nil, nil
}

func progressText(p *reinsv1.Progress) string {
	if p.GetMessage() != "" {
		return p.GetMessage()
	}
	return strings.ToLower(strings.TrimPrefix(p.GetPhase().String(), "PROGRESS_PHASE_"))
}

// progressOf sends the client MCP progress notifications, when it asked
// for them with a progress token.
func progressOf(ctx context.Context, req *sdk.CallToolRequest) func(msg string) {
	tok := req.Params.GetProgressToken()
	if tok == nil || req.Session == nil {
		return func(string) {}
	}
	n := 0.0
	return func(msg string) {
		if msg == "" {
			return
		}
		n++
		req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: tok, Progress: n, Message: msg})
	}
}

func (t *tools) list(ctx context.Context, req *sdk.CallToolRequest, a listArgs) (*sdk.CallToolResult, any, error) {
	sbs, err := t.c.List(ctx, a.Labels)
	if err != nil {
		return nil, nil, err
	}
	js, err := protoJSON(&reinsv1.ListSandboxesResponse{Sandboxes: sbs})
	if err != nil {
		return nil, nil, err
	}
	var b strings.Builder
	if len(sbs) == 0 {
		b.WriteString("no sandboxes")
	}
	for _, sb := range sbs {
		state := strings.ToLower(strings.TrimPrefix(sb.GetState().String(), "SANDBOX_STATE_"))
		fmt.Fprintf(&b, "%s\t%s\t%s", sb.GetId(), state, sb.GetSpec().GetImage())
		for _, k := range slices.Sorted(maps.Keys(sb.GetSpec().GetLabels())) {
			fmt.Fprintf(&b, "\t%s=%s", k, sb.GetSpec().GetLabels()[k])
		}
		b.WriteByte('\n')
	}
	return result(b.String(), js), nil, nil
}

func (t *tools) delete(ctx context.Context, req *sdk.CallToolRequest, a idArgs) (*sdk.CallToolResult, any, error) {
	if a.SandboxID == "" {
		return nil, nil, argError("sandbox_id", "is empty: give the id of the sandbox to delete")
	}
	if err := t.c.Delete(ctx, a.SandboxID); err != nil {
		return nil, nil, err
	}
	return result("deleted sandbox "+a.SandboxID, map[string]any{"sandbox_id": a.SandboxID, "deleted": true}), nil, nil
}

func (t *tools) portURL(ctx context.Context, req *sdk.CallToolRequest, a portArgs) (*sdk.CallToolResult, any, error) {
	if a.SandboxID == "" {
		return nil, nil, argError("sandbox_id", "is empty: give the sandbox's id")
	}
	if a.Port < 1 || a.Port > 65535 {
		return nil, nil, argError("port", "%d is outside 1-65535", a.Port)
	}
	var ttl time.Duration
	if a.TTL != "" {
		d, err := parseDuration(a.TTL)
		if err != nil {
			return nil, nil, argError("ttl", "%v", err)
		}
		ttl = d
	}
	resp, err := t.c.PortURL(ctx, a.SandboxID, a.Port, a.Public, ttl)
	if err != nil {
		return nil, nil, err
	}
	js, err := protoJSON(resp)
	if err != nil {
		return nil, nil, err
	}
	text := resp.GetUrl()
	if !a.Public {
		text += " (send the reins token as Authorization: Bearer; public: true makes a link that needs none)"
	}
	return result(text, js), nil, nil
}
