// Package jsonfile writes records as JSON files atomically and durably:
// a crash leaves the old file or the new one, never half of either.
package jsonfile

import (
	"encoding/json"
	"os"
)

// Write writes v, indented, to path: a temporary file beside it (mode
// 0600), synced, then renamed over it.
func Write(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}
