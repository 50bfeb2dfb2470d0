package e2b

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/client"
	"github.com/reinsdev/reins/errdefs"
)

// jsonInt is a JSON integer kept as written, so that one too large for
// any type is refused in words rather than by the decoder.
type jsonInt string

func (n *jsonInt) UnmarshalJSON(b []byte) error {
	*n = jsonInt(b)
	return nil
}

// rawJSON is a field reins refuses by name when it is set (null is not).
type rawJSON []byte

func (r *rawJSON) UnmarshalJSON(b []byte) error {
	*r = append((*r)[:0], b...)
	return nil
}

func (r rawJSON) set() bool { return len(r) > 0 && string(r) != "null" }

// Timeouts: E2B's default when a create names none, and the longest
// reins sets (its manager's bound on an expiry).
const (
	defaultTimeout = 15 * time.Second
	maxTimeout     = 365 * 24 * time.Hour
)

// timeoutOf reads a timeout in seconds; a missing one is the default
// when orDefault, else an error.
func timeoutOf(n *jsonInt, orDefault bool) (time.Duration, error) {
	if n == nil || *n == "null" {
		if orDefault {
			return defaultTimeout, nil
		}
		return 0, errdefs.WithMessage(errdefs.ErrInvalidArgument, "timeout is missing: give the seconds from now until the sandbox ends")
	}
	secs, err := strconv.ParseInt(string(*n), 10, 64)
	if err != nil || secs < 1 || secs > int64(maxTimeout/time.Second) {
		return 0, fmt.Errorf("timeout %.40s: give whole seconds from 1 to %d (365 days): %w", string(*n), int64(maxTimeout/time.Second), errdefs.ErrInvalidArgument)
	}
	return time.Duration(secs) * time.Second, nil
}

// builtins are the images an E2B templateID may name; "base", E2B's
// default, is debian (bash, coreutils, python3, node).
var builtins = map[string]string{
	"base": "debian", "debian": "debian", "busybox": "busybox", "agents": "agents", "desktop": "desktop",
}

// templateName is what a reins template's name may be; a templateID
// that is not one (a path, an image reference, "template:...") is
// refused before anything is looked up.
var templateName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// imageOf maps a templateID to the image reins makes the sandbox from: a
// built-in image, or a template of the caller's.
func imageOf(ctx context.Context, c *client.Client, id string) (string, error) {
	if img, ok := builtins[id]; ok {
		return img, nil
	}
	if !templateName.MatchString(id) {
		return "", fmt.Errorf("templateID %.80q: name a built-in template (base, debian, busybox, agents, desktop) or one of your reins templates ([a-z0-9._-], as `reins template ls` shows them); paths and image references are not templates: %w", id, errdefs.ErrInvalidArgument)
	}
	tmpls, err := c.ListTemplates(ctx)
	if err != nil {
		return "", err
	}
	for _, t := range tmpls {
		if t.Name == id {
			return "template:" + id, nil
		}
	}
	return "", fmt.Errorf("template %s not found: name a built-in one (base, debian, busybox, agents, desktop) or build one with `reins template build`: %w", id, errdefs.ErrNotFound)
}

// Bounds on metadata, below the manager's on labels so that the answer
// is E2B's words and the template's label always fits.
const (
	maxMetadata      = 32
	maxMetadataKey   = 128
	maxMetadataValue = 512
	maxEnvVars       = 512
)

func checkMetadata(md map[string]string) error {
	if len(md) > maxMetadata {
		return fmt.Errorf("metadata has %d keys: at most %d: %w", len(md), maxMetadata, errdefs.ErrInvalidArgument)
	}
	for k, v := range md {
		switch {
		case k == "" || len(k) > maxMetadataKey:
			return fmt.Errorf("metadata key %.40q: keys are 1 to %d bytes: %w", k, maxMetadataKey, errdefs.ErrInvalidArgument)
		case !printable(k):
			return fmt.Errorf("metadata key %.40q: keys are printable UTF-8, without control characters: %w", k, errdefs.ErrInvalidArgument)
		case strings.HasPrefix(k, labelPrefix) || strings.HasPrefix(k, reinsPrefix):
			return fmt.Errorf("metadata key %.40q: keys that begin %q or %q are reins' own: choose another: %w", k, labelPrefix, reinsPrefix, errdefs.ErrInvalidArgument)
		case len(v) > maxMetadataValue || !printable(v) && v != "":
			return fmt.Errorf("metadata %.40q: its value must be printable UTF-8 of at most %d bytes: %w", k, maxMetadataValue, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

func envOf(vars map[string]string) ([]string, error) {
	if len(vars) > maxEnvVars {
		return nil, fmt.Errorf("envVars has %d variables: at most %d: %w", len(vars), maxEnvVars, errdefs.ErrInvalidArgument)
	}
	var env []string
	for k, v := range vars {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("envVars %.40q: a name is not empty and has no = or NUL, a value no NUL: %w", k, errdefs.ErrInvalidArgument)
		}
		env = append(env, k+"="+v)
	}
	return env, nil
}

// specOf maps a create's body onto a reins spec (decision
// 0051-e2bctl-mapping.md).
func (h *Handler) specOf(ctx context.Context, c *client.Client, b *newSandbox) (*reinsv1.SandboxSpec, error) {
	for name, set := range map[string]bool{"mcp": b.MCP.set(), "iam": b.IAM.set(), "volumeMounts": b.VolumeMounts.set()} {
		if set {
			return nil, fmt.Errorf("reins does not implement the create option %s: leave it out: %w", name, errdefs.ErrUnimplemented)
		}
	}
	if b.AutoResume != nil && b.AutoResume.Enabled {
		return nil, fmt.Errorf("reins does not implement autoResume (resume by traffic): resume with Sandbox.connect: %w", errdefs.ErrUnimplemented)
	}
	if b.TemplateID == "" {
		return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "templateID is missing: name a template, e.g. base")
	}
	ttl, err := timeoutOf(b.Timeout, true)
	if err != nil {
		return nil, err
	}
	if err := checkMetadata(b.Metadata); err != nil {
		return nil, err
	}
	env, err := envOf(b.EnvVars)
	if err != nil {
		return nil, err
	}
	network, err := networkOf(b.AllowInternetAccess, b.Network)
	if err != nil {
		return nil, err
	}
	image, err := imageOf(ctx, c, b.TemplateID)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{labelTemplate: b.TemplateID}
	for k, v := range b.Metadata {
		labels[k] = v
	}
	onExpire := reinsv1.ExpireAction_EXPIRE_ACTION_DELETE
	if b.AutoPause != nil && *b.AutoPause {
		onExpire = reinsv1.ExpireAction_EXPIRE_ACTION_SUSPEND
	}
	return &reinsv1.SandboxSpec{
		Image: image, TtlMs: ttl.Milliseconds(), Env: env, Labels: labels,
		Network: network, OnExpire: onExpire,
	}, nil
}

// networkOf maps allow_internet_access and network onto reins' modes:
// E2B's default (the internet) is open; no internet, or denyOut
// 0.0.0.0/0, is egress to the hosts and addresses of allowOut (none:
// nothing leaves). reins cannot deny some addresses and allow the rest.
func networkOf(internet *bool, n *networkConfig) (*reinsv1.Network, error) {
	closed := internet != nil && !*internet
	var allowHosts, allowCIDRs []string
	if n != nil {
		for name, set := range map[string]bool{"network.egressProxy": n.EgressProxy.set(), "network.rules": n.Rules.set(),
			"network.maskRequestHost": n.MaskRequestHost != nil, "network.httpsPorts": n.HTTPSPorts.set()} {
			if set {
				return nil, fmt.Errorf("reins does not implement %s: leave it out: %w", name, errdefs.ErrUnimplemented)
			}
		}
		if len(n.AllowOut)+len(n.DenyOut) > 256 {
			return nil, errdefs.WithMessage(errdefs.ErrInvalidArgument, "network: at most 256 allowOut and denyOut entries")
		}
		for _, d := range n.DenyOut {
			if d != "0.0.0.0/0" && d != "::/0" {
				return nil, fmt.Errorf("network.denyOut %.60q: reins denies everything or nothing: deny 0.0.0.0/0 and list what to allow in allowOut: %w", d, errdefs.ErrInvalidArgument)
			}
			closed = true
		}
		for _, a := range n.AllowOut {
			if _, err := netip.ParsePrefix(a); err == nil {
				allowCIDRs = append(allowCIDRs, a)
			} else if _, err := netip.ParseAddr(a); err == nil {
				allowCIDRs = append(allowCIDRs, a)
			} else {
				allowHosts = append(allowHosts, a)
			}
		}
	}
	if !closed {
		return &reinsv1.Network{Mode: reinsv1.NetworkMode_NETWORK_MODE_OPEN}, nil
	}
	// Egress with nothing allowed, not none: a sandbox made with none
	// has no interface, and E2B lets the internet be opened later.
	return &reinsv1.Network{Mode: reinsv1.NetworkMode_NETWORK_MODE_EGRESS, AllowHosts: allowHosts, AllowCidrs: allowCIDRs}, nil
}
