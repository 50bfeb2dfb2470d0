package mirrortest

import (
	"archive/zip"
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/reinsdev/reins/internal/testenv"
)

// TestHostClients runs the git and npm commands with the host's clients
// (apt and pip would install into the host; the debian image's test
// proves them in a chroot, image.TestDebian).
func TestHostClients(t *testing.T) {
	m := Start(t)
	for _, tool := range []Tool{Git, NPM} {
		t.Run(string(tool), func(t *testing.T) {
			testenv.RequiresBinary(t, map[Tool]string{Git: "git", NPM: "npm"}[tool], map[Tool]string{Git: "git", NPM: "npm"}[tool])
			cmd := exec.Command("sh", "-c", Command(tool, m.Source(tool).URL))
			tmp := t.TempDir()
			cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "HOME="+tmp, "npm_config_cache="+tmp+"/npm-cache")
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), Marker(tool)) {
				t.Fatalf("%v, want %q in:\n%s", err, Marker(tool), out)
			}
		})
	}
	if !m.Git.Served("/hello.git/info/refs") || !m.Git.Served("/git-upload-pack") {
		t.Errorf("git source saw %v", m.Git.Requests())
	}
	if !m.NPM.Served("/"+Package) || !m.NPM.Served("/"+Package+"-1.0.0.tgz") {
		t.Errorf("npm source saw %v", m.NPM.Requests())
	}
}

func get(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	return b
}

// TestSourcesServe checks what apt and pip read: the Release names the
// Packages list, which names the .deb; the index links the wheel, whose
// RECORD lists every file.
func TestSourcesServe(t *testing.T) {
	m := Start(t)
	release := string(get(t, m.Apt.URL+"/dists/stable/Release"))
	if !strings.Contains(release, "main/binary-") || !strings.Contains(release, "SHA256:") {
		t.Errorf("Release:\n%s", release)
	}
	list := release[strings.LastIndex(release, " ")+1 : len(release)-1]
	packages := string(get(t, m.Apt.URL+"/dists/stable/"+list))
	_, file, _ := strings.Cut(packages, "Filename: ")
	file, _, _ = strings.Cut(file, "\n")
	if deb := get(t, m.Apt.URL+"/"+file); !bytes.HasPrefix(deb, []byte("!<arch>\ndebian-binary")) {
		t.Errorf("%s is not a .deb", file)
	}

	index := string(get(t, m.Pip.URL+"/simple/"+Package+"/"))
	_, href, _ := strings.Cut(index, `href="../../`)
	href, _, _ = strings.Cut(href, "#")
	whl := get(t, m.Pip.URL+"/"+href)
	zr, err := zip.NewReader(bytes.NewReader(whl), int64(len(whl)))
	if err != nil {
		t.Fatal(err)
	}
	var record string
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, "/RECORD") {
			rc, _ := f.Open()
			b, _ := io.ReadAll(rc)
			record = string(b)
		}
	}
	for _, f := range zr.File {
		if !strings.Contains(record, f.Name+",") {
			t.Errorf("RECORD lacks %s:\n%s", f.Name, record)
		}
	}
	if len(m.Apt.Requests()) != 3 || m.Apt.Requests()[0].Path != "/dists/stable/Release" {
		t.Errorf("apt source saw %v", m.Apt.Requests())
	}
}

func TestCommandEnv(t *testing.T) {
	if Env("") != nil {
		t.Errorf("Env(\"\") = %v", Env(""))
	}
	env := strings.Join(Env("http://10.0.0.1:3128"), " ")
	for _, k := range []string{"http_proxy=http://10.0.0.1:3128", "HTTPS_PROXY=http://10.0.0.1:3128", "no_proxy="} {
		if !strings.Contains(env, k) {
			t.Errorf("Env lacks %s: %s", k, env)
		}
	}
	for _, tool := range Tools {
		if c := Command(tool, "http://mirror.test:8080/"); !strings.Contains(c, "http://mirror.test:8080") || strings.Contains(c, "8080//") {
			t.Errorf("Command(%s):\n%s", tool, c)
		}
	}
}
