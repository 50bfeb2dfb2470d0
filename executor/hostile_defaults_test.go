package executor_test

import (
	"strings"
	"testing"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/executor"
	"github.com/reinsdev/reins/executor/client"
)

// SetDefaults is bounded (an environment every later process would carry)
// and authenticated like every call; a refused call changes nothing.
func TestSetDefaultsRefusals(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	big := "BIG=" + strings.Repeat("x", executor.MaxDefaultEnvBytes)
	wantKind(t, e.c.SetDefaults(ctx, []string{big}, "", false), errdefs.ErrInvalidArgument, "at most")
	many := make([]string, executor.MaxDefaultEnv+1)
	for i := range many {
		many[i] = "V=1"
	}
	wantKind(t, e.c.SetDefaults(ctx, many, "", false), errdefs.ErrInvalidArgument, "at most")
	wantKind(t, e.c.SetDefaults(ctx, []string{"NOEQUALS"}, "", false), errdefs.ErrInvalidArgument, "KEY=VALUE")
	wantKind(t, e.c.SetDefaults(ctx, []string{"A=b\x00c"}, "", false), errdefs.ErrInvalidArgument, "NUL")
	wantKind(t, e.c.SetDefaults(ctx, nil, "../../etc", false), errdefs.ErrInvalidArgument, "absolute")

	wrong, err := client.Dial(ctx, e.sock, "wrong-token")
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	wantKind(t, wrong.SetDefaults(ctx, []string{"LC_ALL=evil"}, "/evil", false), errdefs.ErrUnauthenticated)

	out, _, _, err := e.c.Run(ctx, "sh", "-c", `echo $LC_ALL; pwd`)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(out); got != "C\n"+e.root+"\n" {
		t.Errorf("after refused calls the environment or workdir changed: %q", got)
	}
}
