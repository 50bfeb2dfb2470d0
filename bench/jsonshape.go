package main

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	executorv1 "github.com/reinsdev/reins/api/reins/executor/v1"
	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	"github.com/reinsdev/reins/server/wire"
)

// jsonShape: what writing the API's JSON costs with wire.JSON (its own
// walk of the message: numbers, RFC 3339 times) beside protojson with the
// options it replaced (proto names, every field), on the answers JSON
// callers get most: a list of sandboxes (sandbox ls --json) and exec
// output events (a streaming exec in JSON). Rounds interleave the two.
func (b *bench) jsonShape(rounds int) error {
	list := &reinsv1.ListSandboxesResponse{}
	for i := range 100 {
		list.Sandboxes = append(list.Sandboxes, &reinsv1.Sandbox{Id: fmt.Sprintf("sbx_%016x", i),
			Spec: &reinsv1.SandboxSpec{Image: "busybox", Backend: "gvisor", Cpus: 1, MemoryBytes: 1 << 30, Pids: 4096,
				DiskBytes: 4 << 30, Labels: map[string]string{"team": "a", "reins.run": "run_1"}, Env: []string{"A=1", "B=2"},
				Network: &reinsv1.Network{Mode: reinsv1.NetworkMode_NETWORK_MODE_EGRESS, AllowHosts: []string{"pypi.org"}}},
			State: reinsv1.SandboxState_SANDBOX_STATE_RUNNING, ImageDigest: "sha256:05f152fbd62c6be52040824e3e3ce5a968f6cec180eba808792c439526627521",
			CreatedUnixNano: time.Now().UnixNano(), ExpiresUnixNano: time.Now().Add(time.Hour).UnixNano(), MemoryBytes: 30 << 20, PeakMemoryBytes: 40 << 20})
	}
	event := &executorv1.ExecEvent{Event: &executorv1.ExecEvent_Stdout{Stdout: make([]byte, 4096)}}
	old := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}
	for _, c := range []struct {
		what string
		m    proto.Message
		n    int
	}{{"sandbox ls --json (100 sandboxes)", list, rounds}, {"an exec output event (4 KiB)", event, rounds * 50}} {
		var ours, base time.Duration
		for range 5 {
			d, err := timeMarshal(c.n, func() ([]byte, error) { return wire.JSON.Marshal(c.m) })
			if err != nil {
				return err
			}
			ours += d
			d, err = timeMarshal(c.n, func() ([]byte, error) { return old.Marshal(c.m) })
			if err != nil {
				return err
			}
			base += d
		}
		per := func(d time.Duration) string {
			d /= time.Duration(5 * c.n)
			return d.Round(max(d/1000, 1)).String()
		}
		b.add("JSON of "+c.what+": wire.JSON vs protojson", per(ours), per(base), float64(ours)/float64(base), "≤ 1.5×")
	}
	return nil
}

func timeMarshal(n int, marshal func() ([]byte, error)) (time.Duration, error) {
	start := time.Now()
	for range n {
		if _, err := marshal(); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}
