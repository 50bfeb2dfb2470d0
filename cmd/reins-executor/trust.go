package main

import (
	"bytes"
	"fmt"
	"os"
)

// Trust stores of the common distributions, in the order tried: Debian
// and Alpine, Fedora, the BSD-style single file.
var bundles = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

// localCA is where update-ca-certificates picks up local CAs, so that a
// later run of it (an apt upgrade of ca-certificates) keeps ours.
var localCA = "/usr/local/share/ca-certificates/reins-sandbox-ca.crt"

// trustCA adds the sandbox's CA (the service's proxy terminates TLS with
// it to put secrets into requests; its key never enters the sandbox) to
// the sandbox's trust store, here inside, and points the variables that
// TLS stacks read at it. It returns what it did, for the log.
func trustCA(path string) (string, error) {
	ca, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	if !bytes.Contains(ca, []byte("-----BEGIN CERTIFICATE-----")) {
		return "", fmt.Errorf("%s holds no PEM certificate", path)
	}
	bundle := path
	for _, b := range bundles {
		st, err := os.Stat(b)
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(b)
		if err != nil {
			continue
		}
		if !bytes.Contains(data, bytes.TrimSpace(ca)) {
			f, err := os.OpenFile(b, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				continue // a read-only store: the variables still name ours
			}
			_, err = f.Write(append([]byte("\n"), ca...))
			f.Close()
			if err != nil {
				continue
			}
		}
		bundle = b
		break
	}
	if st, err := os.Stat("/usr/local/share/ca-certificates"); err == nil && st.IsDir() {
		os.WriteFile(localCA, ca, 0o644)
	}
	for _, kv := range [][2]string{
		{"SSL_CERT_FILE", bundle}, {"REQUESTS_CA_BUNDLE", bundle}, {"CURL_CA_BUNDLE", bundle},
		{"GIT_SSL_CAINFO", bundle}, {"PIP_CERT", bundle}, {"NODE_EXTRA_CA_CERTS", path},
	} {
		if _, set := os.LookupEnv(kv[0]); !set {
			os.Setenv(kv[0], kv[1])
		}
	}
	return bundle, nil
}
