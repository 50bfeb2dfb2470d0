package e2e

import (
	"strings"
	"testing"

	"github.com/reinsdev/reins/internal/testenv"
)

// TestExecAsUser: the debian image's non-root account, on both backends,
// through `reins sandbox exec --user` (E2B's SDK runs its commands so).
func TestExecAsUser(t *testing.T) {
	testenv.RequiresBinary(t, "debootstrap", "debootstrap")
	s := startService(t)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			id := s.create("--image", "debian", "--backend", backend)
			defer s.run("sandbox", "rm", id)
			for _, tc := range []struct {
				argv []string
				want string
			}{
				{[]string{"id", "-u"}, "1000\n"},
				{[]string{"id", "-un"}, "user\n"},
				{[]string{"sh", "-c", `echo "$HOME $USER $LOGNAME $SHELL"; pwd`}, "/home/user user user /bin/bash\n/home/user\n"},
				{[]string{"bash", "-l", "-c", "echo $0 $(whoami) $(stat -c %U ~)"}, "bash user user\n"},
				{[]string{"sh", "-c", "echo hi > ~/f && cat ~/f && stat -c %u:%g ~/f"}, "hi\n1000:1000\n"},
			} {
				r := s.run(append([]string{"sandbox", "exec", "-u", "user", id, "--"}, tc.argv...)...)
				if r.code != 0 || r.stdout != tc.want {
					t.Errorf("%s as user: %s\nwant stdout %q", strings.Join(tc.argv, " "), r, tc.want)
				}
			}
			r := s.run("sandbox", "exec", "--user", "user", id, "--", "touch", "/root/x")
			if r.code == 0 || !strings.Contains(r.stderr, "Permission denied") {
				t.Errorf("touch /root/x as user: %s\nwant permission denied", r)
			}
			if r := s.run("sandbox", "exec", id, "--", "id", "-u"); r.code != 0 || r.stdout != "0\n" {
				t.Errorf("without --user: %s, want root", r)
			}
			r = s.run("sandbox", "exec", "-u", "nosuch", id, "--", "true")
			if r.code == 0 || !strings.Contains(r.stderr, `user "nosuch" is not in the sandbox's /etc/passwd`) {
				t.Errorf("an unknown user: %s", r)
			}
		})
	}
}
