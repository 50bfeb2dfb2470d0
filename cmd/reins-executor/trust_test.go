package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTrustCA(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	pem := "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	os.WriteFile(ca, []byte(pem), 0o444)
	bundle := filepath.Join(dir, "bundle.crt")
	os.WriteFile(bundle, []byte("-----BEGIN CERTIFICATE-----\nOTHER\n-----END CERTIFICATE-----\n"), 0o644)
	oldB, oldL := bundles, localCA
	t.Cleanup(func() { bundles, localCA = oldB, oldL })
	bundles, localCA = []string{filepath.Join(dir, "missing"), bundle}, filepath.Join(dir, "local.crt")
	for _, k := range []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "PIP_CERT"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	for range 2 { // twice: the second adds nothing
		got, err := trustCA(ca)
		if err != nil || got != bundle {
			t.Fatalf("trustCA = %q, %v; want %q", got, err, bundle)
		}
	}
	data, _ := os.ReadFile(bundle)
	if strings.Count(string(data), "MIIB") != 1 || !strings.Contains(string(data), "OTHER") {
		t.Errorf("bundle after two calls:\n%s", data)
	}
	if os.Getenv("SSL_CERT_FILE") != bundle || os.Getenv("NODE_EXTRA_CA_CERTS") != ca {
		t.Errorf("SSL_CERT_FILE=%q NODE_EXTRA_CA_CERTS=%q", os.Getenv("SSL_CERT_FILE"), os.Getenv("NODE_EXTRA_CA_CERTS"))
	}
	// No store at all (busybox): the variables name the CA itself.
	bundles = []string{filepath.Join(dir, "missing")}
	os.Unsetenv("SSL_CERT_FILE")
	if got, err := trustCA(ca); err != nil || got != ca || os.Getenv("SSL_CERT_FILE") != ca {
		t.Errorf("without a store: %q, %v, SSL_CERT_FILE=%q", got, err, os.Getenv("SSL_CERT_FILE"))
	}
	os.WriteFile(filepath.Join(dir, "junk"), []byte("not a cert"), 0o444)
	if _, err := trustCA(filepath.Join(dir, "junk")); err == nil {
		t.Error("a file with no certificate was trusted")
	}
}
