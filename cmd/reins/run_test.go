package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestRunAgentFlags: flags that do not fit together are refused before
// anything is sent, in words (an ignored --memory would leave the run at
// a limit it did not ask for).
func TestRunAgentFlags(t *testing.T) {
	t.Setenv("REINS_URL", "http://127.0.0.1:1") // nothing is dialled
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--memory", "4G", "task"}, "--memory is for agent runs"},
		{[]string{"--agent", "codex", "--in", "abc", "--memory", "4G", "task"}, "--memory sizes a new sandbox"},
		{[]string{"--agent", "codex", "--in", "abc", "--image", "agents", "task"}, "either --image or --in"},
	} {
		c := runCmd()
		var out bytes.Buffer
		c.SetOut(&out)
		c.SetErr(&out)
		c.SetArgs(tc.args)
		err := c.Execute()
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want a usage error saying %q", tc.args, err, tc.want)
		}
	}
}
