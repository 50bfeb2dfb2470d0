package jsonfile_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/reinsdev/reins/internal/jsonfile"
)

func TestWriteReplacesWhole(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.json")
	for _, v := range []map[string]int{{"a": 1}, {"b": 2}} {
		if err := jsonfile.Write(p, v); err != nil {
			t.Fatal(err)
		}
		var got map[string]int
		data, _ := os.ReadFile(p)
		if err := json.Unmarshal(data, &got); err != nil || len(got) != 1 {
			t.Fatalf("after writing %v: %s, %v", v, data, err)
		}
	}
	if _, err := os.Stat(p + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("the temporary file is left: %v", err)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	if err := jsonfile.Write(filepath.Join(t.TempDir(), "no", "dir.json"), 1); err == nil {
		t.Error("a write into a missing directory succeeded")
	}
}
