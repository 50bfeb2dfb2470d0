package e2e

import (
	"archive/tar"
	"context"
	"strings"
	"testing"
	"time"

	reinsv1 "github.com/reinsdev/reins/api/reins/v1"
	reinsclient "github.com/reinsdev/reins/client"
)

// TestHostileTemplateNames: a template name is one file name of its
// tenant's; "/" and ".." are refused by build, and answered as missing
// by rm and by create --image template:NAME.
func TestHostileTemplateNames(t *testing.T) {
	s := startService(t)
	for _, name := range []string{"a/b", "..", "../x", "x/../../etc", "UPPER"} {
		if r := s.run("template", "build", name, "--from", "busybox", "--run", "true"); r.code == 0 || !strings.Contains(r.stderr, "is not valid") {
			t.Errorf("build %q: %s", name, r)
		}
		if r := s.run("template", "rm", name); r.code == 0 || !strings.Contains(r.stderr, "not found") {
			t.Errorf("rm %q: %s", name, r)
		}
		if r := s.run("sandbox", "create", "--image", "template:"+name); r.code == 0 || !strings.Contains(r.stderr, "not found") {
			t.Errorf("create --image template:%s: %s", name, r)
		}
	}
	if out := s.must("sandbox", "ls", "--json"); strings.Contains(out, `"id"`) {
		t.Errorf("refused names made sandboxes:\n%s", out)
	}
}

// TestHostileTemplateOutput: a step that prints 1 GiB streams a bounded
// share of it and a count of the rest; the build succeeds, and a step
// that prints a flood and fails still fails with its exit code and tail.
func TestHostileTemplateOutput(t *testing.T) {
	s := startService(t)
	r := s.run("template", "build", "loud", "--from", "busybox", "--run", "head -c 1073741824 /dev/zero")
	if r.code != 0 {
		t.Fatalf("build: exit %d\n%.2000s", r.code, r.stderr)
	}
	if len(r.stderr) > 2<<20 || !strings.Contains(r.stderr, "of output not shown, of 1 GiB in all") {
		t.Errorf("stderr is %d bytes (want at most 2 MiB, with a count of what was not shown): …%s", len(r.stderr), r.stderr[max(0, len(r.stderr)-300):])
	}
	r = s.run("template", "build", "loudfail", "--from", "busybox", "--run", "head -c 67108864 /dev/zero; echo; echo the end; exit 5")
	if r.code != 5 || len(r.stderr) > 2<<20 || !strings.Contains(r.stderr, "the end") {
		t.Errorf("failing build: exit %d, %d bytes of stderr: …%s", r.code, len(r.stderr), r.stderr[max(0, len(r.stderr)-300):])
	}
	if _, ok := s.templates()["loudfail"]; ok {
		t.Error("a failed build left a template")
	}
}

// TestHostileTemplateCopyTarBomb: a copy step's tar that claims a TiB of
// content (sent through the API, as a hostile client would) is refused by
// the executor's extractor before anything is written for it; the build
// fails saying so and leaves no template and no build sandbox.
func TestHostileTemplateCopyTarBomb(t *testing.T) {
	s := startService(t)
	bomb := tarOf(t, &tar.Header{Name: "bomb", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1 << 40})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	api := reinsclient.New(s.url, s.token)
	_, err := api.BuildTemplate(ctx, &reinsv1.BuildTemplateRequest{Name: "bomb", From: "busybox", Steps: []*reinsv1.TemplateStep{
		{Step: &reinsv1.TemplateStep_Copy{Copy: &reinsv1.TemplateCopy{Tar: bomb, Dst: "/bomb", Src: "bomb.tar"}}},
	}}, nil)
	if err == nil || !strings.Contains(err.Error(), "past its cap") {
		t.Fatalf("build with a tar bomb: %v, want the extractor's refusal", err)
	}
	if _, ok := s.templates()["bomb"]; ok {
		t.Error("a refused copy left a template")
	}
	noBuildSandboxes(t, s)
}
