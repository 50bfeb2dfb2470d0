package sandbox

import "github.com/reinsdev/reins/egress"

// NetworkRequest is what the service's network boundary needs to give a
// sandbox its network (egress/boundary): its rules, and what must stay the
// same across its starts (the placeholders its environment holds).
type NetworkRequest struct {
	ID     string
	Tenant string
	// Dir is the sandbox's host directory, the service's alone: the
	// boundary keeps its files for the sandbox there (a read-only view of
	// some of them is mounted in), never on the sandbox's disk.
	Dir      string
	Hostname string
	Rules    egress.Rules // normalized
	// Placeholders are the secret placeholders given at an earlier start
	// (secret name → placeholder): a sandbox keeps its environment.
	Placeholders map[string]string
}

// NetworkConfig is what a sandbox gets from the boundary, for its bundle.
type NetworkConfig struct {
	NetNS string   // Bundle.NetNS; "" lets the runtime make one with loopback only
	Env   []string // proxy variables, secret placeholders
	// Mounts are read-only files of the boundary's (resolv.conf, hosts,
	// the sandbox's CA certificate).
	Mounts []Mount
	// ExecutorArgs are added to the executor's command line (the CA to
	// add to the sandbox's trust store, inside).
	ExecutorArgs []string
	Placeholders map[string]string
	Addr         string // the sandbox's address, as users are shown it
}
