package e2b

import (
	"math"
	"strings"
	"time"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
)

// The control plane's JSON, as E2B's OpenAPI description (spec/openapi.yml
// of e2b-dev/E2B) names it. Only what reins fills is here; the SDKs read
// absent fields as unset.

// newSandbox is POST /sandboxes' and /v2/sandboxes' body (NewSandbox).
type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *jsonInt          `json:"timeout"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          *autoResume       `json:"autoResume"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             *networkConfig    `json:"network"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	// Taken as raw JSON so that reins can refuse them by name.
	MCP          rawJSON `json:"mcp"`
	IAM          rawJSON `json:"iam"`
	VolumeMounts rawJSON `json:"volumeMounts"`
}

type autoResume struct {
	Enabled bool `json:"enabled"`
}

// networkConfig is SandboxNetworkConfig.
type networkConfig struct {
	AllowPublicTraffic *bool    `json:"allowPublicTraffic"`
	AllowOut           []string `json:"allowOut"`
	DenyOut            []string `json:"denyOut"`
	EgressProxy        rawJSON  `json:"egressProxy"`
	MaskRequestHost    *string  `json:"maskRequestHost"`
	Rules              rawJSON  `json:"rules"`
	HTTPSPorts         rawJSON  `json:"httpsPorts"`
}

// timeoutBody is the body of /timeout, /connect and /resume.
type timeoutBody struct {
	Timeout   *jsonInt `json:"timeout"`
	AutoPause *bool    `json:"autoPause"`
	Memory    *bool    `json:"memory"` // /connect: false reboots
}

// pauseBody is /pause's (SandboxPauseRequest).
type pauseBody struct {
	Memory *bool `json:"memory"`
}

// sandboxReply is Sandbox: the create, resume and connect replies.
type sandboxReply struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// listedSandbox is ListedSandbox, an entry of the lists.
type listedSandbox struct {
	TemplateID   string            `json:"templateID"`
	Alias        string            `json:"alias,omitempty"`
	SandboxID    string            `json:"sandboxID"`
	ClientID     string            `json:"clientID"`
	StartedAt    string            `json:"startedAt"`
	EndAt        string            `json:"endAt"`
	CPUCount     int               `json:"cpuCount"`
	MemoryMB     int64             `json:"memoryMB"`
	DiskSizeMB   int64             `json:"diskSizeMB"`
	Metadata     map[string]string `json:"metadata"`
	State        string            `json:"state"`
	EnvdVersion  string            `json:"envdVersion"`
	VolumeMounts []struct{}        `json:"volumeMounts"`
}

// sandboxDetail is SandboxDetail, GET /sandboxes/{id}.
type sandboxDetail struct {
	listedSandbox
	EnvdAccessToken     string    `json:"envdAccessToken"`
	AllowInternetAccess *bool     `json:"allowInternetAccess"`
	Domain              *string   `json:"domain"`
	Lifecycle           lifecycle `json:"lifecycle"`
}

type lifecycle struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

// metric is SandboxMetric.
type metric struct {
	Timestamp     string  `json:"timestamp"`
	TimestampUnix int64   `json:"timestampUnix"`
	CPUCount      int     `json:"cpuCount"`
	CPUUsedPct    float64 `json:"cpuUsedPct"`
	MemUsed       int64   `json:"memUsed"`
	MemTotal      int64   `json:"memTotal"`
	MemCache      int64   `json:"memCache"`
	DiskUsed      int64   `json:"diskUsed"`
	DiskTotal     int64   `json:"diskTotal"`
}

// Labels reins keeps for E2B: the template a sandbox was asked for. A
// caller's metadata may not use the prefix, nor reins' own.
const (
	labelPrefix   = "e2b."
	labelTemplate = labelPrefix + "template"
	reinsPrefix   = "reins."
	clientID      = "reins"
)

// noEnd is the endAt of a sandbox without a TTL (E2B's always have one).
var noEnd = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

func templateOf(sb *reinsv1.Sandbox) string {
	if t := sb.GetSpec().GetLabels()[labelTemplate]; t != "" {
		return t
	}
	return strings.TrimPrefix(sb.GetSpec().GetImage(), "template:")
}

// metadataOf is a sandbox's labels less reins' and E2B's own.
func metadataOf(sb *reinsv1.Sandbox) map[string]string {
	md := map[string]string{}
	for k, v := range sb.GetSpec().GetLabels() {
		if !strings.HasPrefix(k, labelPrefix) && !strings.HasPrefix(k, reinsPrefix) {
			md[k] = v
		}
	}
	return md
}

func rfc3339(nano int64) string {
	return time.Unix(0, nano).UTC().Format(time.RFC3339Nano)
}

func listed(sb *reinsv1.Sandbox) listedSandbox {
	spec := sb.GetSpec()
	end := noEnd.Format(time.RFC3339Nano)
	if sb.ExpiresUnixNano != 0 {
		end = rfc3339(sb.ExpiresUnixNano)
	}
	return listedSandbox{
		TemplateID: templateOf(sb), SandboxID: sb.Id, ClientID: clientID,
		StartedAt: rfc3339(sb.CreatedUnixNano), EndAt: end,
		CPUCount: max(1, int(math.Ceil(spec.GetCpus()))),
		MemoryMB: spec.GetMemoryBytes() >> 20, DiskSizeMB: spec.GetDiskBytes() >> 20,
		Metadata: metadataOf(sb), State: state(sb), EnvdVersion: EnvdVersion,
		VolumeMounts: []struct{}{},
	}
}

// state is E2B's word for a sandbox that has not stopped: paused for
// reins' paused and suspended alike (both resume on connect).
func state(sb *reinsv1.Sandbox) string {
	switch sb.State {
	case reinsv1.SandboxState_SANDBOX_STATE_PAUSED, reinsv1.SandboxState_SANDBOX_STATE_SUSPENDED:
		return "paused"
	case reinsv1.SandboxState_SANDBOX_STATE_STOPPED:
		return "killed"
	}
	return "running"
}

func running(sb *reinsv1.Sandbox) bool { return state(sb) == "running" }

// gone reports whether a sandbox has stopped: E2B has no such state, a
// killed or timed-out sandbox is not found.
func gone(sb *reinsv1.Sandbox) bool {
	return sb.State == reinsv1.SandboxState_SANDBOX_STATE_STOPPED
}

func allowsInternet(n *reinsv1.Network) *bool {
	open := n.GetMode() == reinsv1.NetworkMode_NETWORK_MODE_OPEN
	return &open
}

func onTimeout(sb *reinsv1.Sandbox) string {
	if sb.GetSpec().GetOnExpire() == reinsv1.ExpireAction_EXPIRE_ACTION_DELETE {
		return "kill"
	}
	return "pause"
}
