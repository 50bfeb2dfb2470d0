package e2b

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"
)

// apiKey is the reins token a request's E2B API key names, or "". The
// key is a reins token as it is ("reins_..."), with an "e2b_" prefix
// ("e2b_reins_..."), or in the form the SDKs' key check accepts,
// "e2b_" and the token's hex digits ("e2b_" + the token without
// "reins_"). An Authorization bearer (E2B's access tokens) is read the
// same way.
func apiKey(r *http.Request) string {
	k := r.Header.Get(APIKeyHeader)
	if k == "" {
		k, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	return reinsToken(strings.TrimSpace(k))
}

// maxKey bounds what is read of a key: reins tokens are 70 bytes.
const maxKey = 256

func reinsToken(k string) string {
	if len(k) > maxKey {
		return ""
	}
	rest, ok := strings.CutPrefix(k, "e2b_")
	switch {
	case !ok:
		return k
	case strings.HasPrefix(rest, "reins_"):
		return rest
	case rest != "" && isHex(rest):
		return "reins_" + rest
	}
	return k // no reins token: the API refuses it
}

func isHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// envdTokens seals and opens envd access tokens: AES-256-GCM over the
// sandbox's id and the caller's reins token, so that a token reaches
// one sandbox only, as the tenant whose key made it, for as long as that
// key is good (docs/decisions/0047-e2b-tokens.md). The token is never
// seen by the sandbox.
type envdTokens struct {
	aead cipher.AEAD
}

// envdPrefix marks reins' envd tokens.
const envdPrefix = "reins_envd_"

// maxEnvdToken bounds an access token read from a request: a sealed id
// of at most 64 bytes and a key of at most maxKey, in base64.
const maxEnvdToken = len(envdPrefix) + (12+64+1+maxKey+16)*4/3 + 4

func newEnvdTokens(key []byte) envdTokens {
	k := sha256.Sum256(append([]byte("reins e2b envd access token\x00"), key...))
	block, err := aes.NewCipher(k[:])
	if err != nil {
		panic(err) // a 32-byte key always makes a cipher
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return envdTokens{aead: aead}
}

// seal makes sandbox id's access token for the holder of token.
func (t envdTokens) seal(id, token string) string {
	nonce := make([]byte, t.aead.NonceSize())
	rand.Read(nonce)
	out := t.aead.Seal(nonce, nonce, []byte(id+"\x00"+token), []byte(envdPrefix))
	return envdPrefix + base64.RawURLEncoding.EncodeToString(out)
}

// open returns the sandbox and the reins token an access token was made
// for; ok is false for anything this service did not seal.
func (t envdTokens) open(s string) (id, token string, ok bool) {
	if len(s) > maxEnvdToken {
		return "", "", false
	}
	b64, found := strings.CutPrefix(s, envdPrefix)
	if !found {
		return "", "", false
	}
	raw, err := base64.RawURLEncoding.DecodeString(b64)
	if err != nil || len(raw) < t.aead.NonceSize()+t.aead.Overhead() {
		return "", "", false
	}
	n := t.aead.NonceSize()
	plain, err := t.aead.Open(nil, raw[:n], raw[n:], []byte(envdPrefix))
	if err != nil {
		return "", "", false
	}
	id, token, found = strings.Cut(string(plain), "\x00")
	return id, token, found && id != "" && token != ""
}
