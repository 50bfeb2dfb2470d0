package manager

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/sandbox"
)

// A pool key is the operator's and may name a host path (or the admin's
// snapshot): a tenant asking for the same reference never gets one of its
// sandboxes (it goes cold, where the image store refuses it), the admin
// does.
func TestPoolHostPathKeyNotForTenants(t *testing.T) {
	for _, key := range []string{"oci:/srv/images/private", "docker-archive:/srv/x.tar", "snapshot:base", "template:web"} {
		m, _ := newPoolManager(t, map[string]int{key: 1}, nil)
		ctx := context.Background()
		// Cold: the image store (or the tenant's snapshots) answers, and
		// here knows none of them.
		if info, err := m.Create(ctx, "acme", sandbox.Spec{Image: key}, nil); err == nil {
			t.Errorf("%s: a tenant's create was served: %s", key, info.ID)
		}
		if st := m.Pool(); st[0].Ready != 1 {
			t.Errorf("%s: a tenant's create took the pool's sandbox", key)
		}
		if strings.HasPrefix(key, "template:") {
			// The admin's create of a template resolves the template
			// first (its backend); this manager keeps none (the
			// template tests hand out a real one).
			continue
		}
		if info, err := m.Create(ctx, "", sandbox.Spec{Image: key}, nil); err != nil || !strings.HasPrefix(info.ID, "pool") {
			t.Errorf("%s: the admin did not get the pool's sandbox: %v %v", key, info.ID, err)
		}
	}
}

// What is refused at a cold create is refused at a hand-out, before the
// pool is touched: an environment too big, the pool's own label.
func TestPoolHandOutRefusals(t *testing.T) {
	m, images := newPoolManager(t, map[string]int{"busybox": 1}, nil)
	ctx := context.Background()
	big := []string{"BIG=" + strings.Repeat("x", maxEnvBytes)}
	if _, err := m.Create(ctx, "acme", sandbox.Spec{Image: "busybox", Env: big}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "env of") {
		t.Errorf("an env too big: %v, want it refused as at create", err)
	}
	for _, k := range []string{LabelPool, LabelPoolReady} {
		if _, err := m.Create(ctx, "acme", sandbox.Spec{Image: "busybox", Labels: map[string]string{k: "busybox"}}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("a tenant's spec with the pool's label %s: %v", k, err)
		}
	}
	if st := m.Pool(); st[0].Ready != 1 || images.calls != 0 {
		t.Errorf("a refused create changed the pool (%+v) or went cold (%d)", st, images.calls)
	}
}
