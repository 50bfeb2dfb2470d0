package mirrortest

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/reinsdev/reins/internal/testenv"
)

// aptHandler serves a repository with one suite, stable, one component,
// main, and one package built with dpkg-deb, for apt's [trusted=yes].
func aptHandler(t testing.TB) http.Handler {
	deb := buildDeb(t)
	arch := runtime.GOARCH // Debian's names for amd64 and arm64 are Go's
	debPath := "pool/main/" + Package + "_1.0_all.deb"
	packages := fmt.Sprintf("Package: %s\nVersion: 1.0\nArchitecture: all\nMaintainer: reins tests <tests@reins.invalid>\n"+
		"Installed-Size: 1\nFilename: %s\nSize: %d\nMD5sum: %x\nSHA256: %x\nDescription: prints %q\n",
		Package, debPath, len(deb), md5.Sum(deb), sha256.Sum256(deb), Marker(Apt))
	listPath := "main/binary-" + arch + "/Packages"
	release := fmt.Sprintf("Origin: reins\nLabel: reins\nSuite: stable\nCodename: stable\n"+
		"Date: Mon, 01 Jan 2024 00:00:00 UTC\nArchitectures: %s\nComponents: main\nSHA256:\n %x %d %s\n",
		arch, sha256.Sum256([]byte(packages)), len(packages), listPath)
	files := map[string][]byte{
		"/dists/stable/Release":     []byte(release),
		"/dists/stable/" + listPath: []byte(packages),
		"/" + debPath:               deb,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := files[r.URL.Path]
		if !ok {
			// InRelease, Release.gpg: apt goes on without. The connection
			// is closed: in the debian image apt's next request on it
			// waited 60 s for an answer (docs/decisions/0025-debian-network-tools.md).
			w.Header().Set("Connection", "close")
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	})
}

// buildDeb makes reins-hello_1.0_all.deb: /usr/bin/reins-hello prints
// Marker(Apt).
func buildDeb(t testing.TB) []byte {
	dpkgDeb := testenv.RequiresBinary(t, "dpkg-deb", "dpkg")
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	control := fmt.Sprintf("Package: %s\nVersion: 1.0\nArchitecture: all\nMaintainer: reins tests <tests@reins.invalid>\nDescription: prints %q\n", Package, Marker(Apt))
	writeFiles(t, root, map[string]string{
		"DEBIAN/control":     control,
		"usr/bin/" + Package: "#!/bin/sh\necho '" + Marker(Apt) + "'\n",
	})
	if err := os.Chmod(filepath.Join(root, "usr/bin", Package), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, Package+".deb")
	if b, err := exec.Command(dpkgDeb, "--root-owner-group", "-Zgzip", "--build", root, out).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb: %v\n%s", err, b)
	}
	deb, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return deb
}

// pipHandler serves a PEP 503 simple index with one wheel.
func pipHandler(t testing.TB) http.Handler {
	name := "reins_hello-1.0-py3-none-any.whl"
	whl := buildWheel(t)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/simple/":
			fmt.Fprintf(w, "<!DOCTYPE html><html><body><a href=\"%s/\">%s</a></body></html>\n", Package, Package)
		case "/simple/" + Package + "/":
			fmt.Fprintf(w, "<!DOCTYPE html><html><body><a href=\"../../packages/%s#sha256=%x\">%s</a></body></html>\n", name, sha256.Sum256(whl), name)
		case "/packages/" + name:
			w.Write(whl)
		default:
			http.NotFound(w, r)
		}
	})
}

// buildWheel makes a pure-Python wheel whose module reins_hello has MARK.
func buildWheel(t testing.TB) []byte {
	files := fstest.MapFS{
		"reins_hello/__init__.py":            file(fmt.Sprintf("MARK = %q\n", Marker(Pip))),
		"reins_hello-1.0.dist-info/METADATA": file("Metadata-Version: 2.1\nName: " + Package + "\nVersion: 1.0\n"),
		"reins_hello-1.0.dist-info/WHEEL":    file("Wheel-Version: 1.0\nGenerator: reins-mirrortest\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
	}
	var record strings.Builder
	for _, name := range slices.Sorted(maps.Keys(files)) {
		sum := sha256.Sum256(files[name].Data)
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", name, base64.RawURLEncoding.EncodeToString(sum[:]), len(files[name].Data))
	}
	record.WriteString("reins_hello-1.0.dist-info/RECORD,,\n")
	files["reins_hello-1.0.dist-info/RECORD"] = file(record.String())
	// Files only, no directory entries (zip.Writer.AddFS would add them).
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		w, err := zw.Create(name)
		if err == nil {
			_, err = w.Write(files[name].Data)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func file(body string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(body), Mode: 0o644} }

// npmHandler serves a registry's metadata of one package, its tarball
// linked by the Host the client asked for.
func npmHandler(t testing.TB) http.Handler {
	tgz := buildNPMTarball(t)
	tarPath := "/" + Package + "/-/" + Package + "-1.0.0.tgz"
	sha512sum := sha512.Sum512(tgz)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/" + Package:
			version := map[string]any{
				"name": Package, "version": "1.0.0", "main": "index.js",
				"dist": map[string]any{
					"tarball":   "http://" + r.Host + tarPath,
					"shasum":    fmt.Sprintf("%x", sha1.Sum(tgz)),
					"integrity": "sha512-" + base64.StdEncoding.EncodeToString(sha512sum[:]),
				},
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{
				"name": Package, "dist-tags": map[string]string{"latest": "1.0.0"},
				"versions": map[string]any{"1.0.0": version},
			})
		case tarPath:
			w.Write(tgz)
		default:
			http.NotFound(w, r)
		}
	})
}

// buildNPMTarball makes package/{package.json,index.js}, gzipped.
func buildNPMTarball(t testing.TB) []byte {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	err := tw.AddFS(fstest.MapFS{
		"package/package.json": file(`{"name":"` + Package + `","version":"1.0.0","main":"index.js"}` + "\n"),
		"package/index.js":     file(fmt.Sprintf("exports.mark = %q;\n", Marker(NPM))),
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = gz.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// gitHandler serves hello.git, made at test time, through the host's
// `git http-backend`.
func gitHandler(t testing.TB) http.Handler {
	gitPath := testenv.RequiresBinary(t, "git", "git")
	dir := t.TempDir()
	work, repos := filepath.Join(dir, "work"), filepath.Join(dir, "repos")
	writeFiles(t, work, map[string]string{"MARK": Marker(Git) + "\n"})
	env := append(os.Environ(), "GIT_AUTHOR_NAME=reins", "GIT_AUTHOR_EMAIL=tests@reins.invalid",
		"GIT_COMMITTER_NAME=reins", "GIT_COMMITTER_EMAIL=tests@reins.invalid", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	for _, args := range [][]string{
		{"-C", work, "init", "-q", "-b", "main"},
		{"-C", work, "add", "MARK"},
		{"-C", work, "commit", "-q", "-m", "hello"},
		{"clone", "-q", "--bare", work, filepath.Join(repos, "hello.git")},
	} {
		cmd := exec.Command(gitPath, args...)
		cmd.Env = env
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, b)
		}
	}
	return &cgi.Handler{
		Path: gitPath,
		Args: []string{"http-backend"},
		Env:  []string{"GIT_PROJECT_ROOT=" + repos, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"},
	}
}

func writeFiles(t testing.TB, root string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
