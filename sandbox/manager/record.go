package manager

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/reinsdev/reins/internal/jsonfile"
	"github.com/reinsdev/reins/sandbox"
)

// recordVersion is bumped when Record changes in a way old code can't read.
const recordVersion = 1

// Record is the persisted handle of one sandbox: everything the service needs
// to re-attach to it after a restart. It is written (atomically) before each
// action it announces, so a crash at any instant leaves a record that says
// what may have happened.
type Record struct {
	sandbox.Info
	Version int      `json:"version"`
	Layers  []string `json:"layers,omitempty"`
	// The image's own env and workdir, to start the sandbox again after a
	// suspend.
	ImageEnv     []string `json:"image_env,omitempty"`
	ImageWorkdir string   `json:"image_workdir,omitempty"`
	Token        string   `json:"token"`
	// Endpoint is where its executor is reached, as its backend said
	// when it last started.
	Endpoint sandbox.Endpoint `json:"endpoint,omitzero"`
	// Pid and PidStart identify the sandbox's host process, so liveness is
	// a read of /proc rather than a call to the runtime.
	Pid      int    `json:"pid,omitempty"`
	PidStart uint64 `json:"pid_start,omitempty"`
	// Placeholders are the secret placeholders in the sandbox's
	// environment (name → placeholder), kept across its starts; NetAddr
	// its address on its network, as the boundary gave it.
	Placeholders map[string]string `json:"placeholders,omitempty"`
	NetAddr      string            `json:"net_addr,omitempty"`
	// NetEnv is what the boundary put in its environment at its last
	// start (proxy variables, placeholders), for a warm pool's hand-out
	// to give the environment a cold create would have.
	NetEnv []string `json:"net_env,omitempty"`
	// GatewayToken is the placeholder token of the sandbox's model
	// gateway (gateway.TokenPrefix…), "" without one; written before it
	// is handed out.
	GatewayToken string `json:"gateway_token,omitempty"`
	// Base is the digest of the snapshot it was made from (a create from
	// snapshot:, a fork), which it needs while it is not stopped.
	Base string `json:"base,omitempty"`
	// PausedMemoryBytes is the size of a paused sandbox's memory image
	// (DIR/checkpoint); 0 when it is not paused.
	PausedMemoryBytes int64 `json:"paused_memory_bytes,omitempty"`
	// DiskKept says a suspended sandbox kept its disk (no workspace
	// store, or its last save failed): it wakes on it. Otherwise a disk
	// found at a wake is a half-made one (a crash mid-restore) and goes.
	DiskKept bool `json:"disk_kept,omitempty"`
}

// image is what r keeps of its image, to start the sandbox again (a
// resume, a restore, a memory fork); its Screen is the sandbox's own.
func (r *Record) image() Image {
	return Image{Digest: r.ImageDigest, Layers: r.Layers, Env: r.ImageEnv, WorkingDir: r.ImageWorkdir, Screen: r.Screen}
}

// saved describes workspace digest of r's sandbox as an unnamed snapshot
// on its image.
func (r *Record) saved(digest string) SnapshotInfo {
	return SnapshotInfo{Tenant: r.Tenant, Digest: digest, Sandbox: r.ID, Image: r.Spec.Image, ImageDigest: r.ImageDigest,
		Layers: r.Layers, ImageEnv: r.ImageEnv, ImageWorkdir: r.ImageWorkdir, ImageScreen: r.Screen}
}

func recordPath(dir string) string { return filepath.Join(dir, "sandbox.json") }

func writeRecord(dir string, r *Record) error {
	r.Version = recordVersion
	if err := writeJSON(recordPath(dir), r); err != nil {
		return fmt.Errorf("writing sandbox record: %w", err)
	}
	return nil
}

// writeJSON writes v to path atomically and durably (jsonfile.Write).
func writeJSON(path string, v any) error { return jsonfile.Write(path, v) }

func readRecord(dir string) (*Record, error) {
	data, err := os.ReadFile(recordPath(dir))
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", recordPath(dir), err)
	}
	if r.Version > recordVersion {
		return nil, fmt.Errorf("%s: record version %d is newer than this reins understands (%d): upgrade reins", recordPath(dir), r.Version, recordVersion)
	}
	return &r, nil
}
