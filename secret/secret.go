// Package secret keeps tenants' secrets on the trusted side: sealed with
// the service's key (DATA/secret.key) before they reach the store, opened
// only in the service, for the egress proxy and trusted tools. No API call
// returns a value; a sandbox only ever sees a placeholder.
//
// A value is sealed with AES-256-GCM under a random 96-bit nonce, with the
// secret's scope (tenant, "" for the admin's own) and name as additional
// data, so a sealed row copied to another tenant or name does not open.
// Sealed, it reads
//
//	version (1 byte, 1) | key id (4) | nonce (12) | ciphertext | tag (16)
//
// where the key id (the first bytes of a hash of the key) tells a value
// sealed with another key from one that was altered. The version and key
// id are authenticated too.
//
// The key protects the database and its backups: a copy of reins.db
// without the key reveals no value (only names, sizes and times). It does
// not protect against whoever reads the key file, nor against the service
// itself, which opens values to use them (docs/security.md, "Secrets").
package secret

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/reinsdev/reins/egress"
	"github.com/reinsdev/reins/errdefs"
	"github.com/reinsdev/reins/store"
)

// MaxValue is the largest secret value.
// It is the proxy's bound (proxy.MaxSecretValue): a value goes into a
// request's header or URL.
const MaxValue = 16 << 10

const (
	version    = 1
	headerSize = 1 + 4 // version, key id
	nonceSize  = 12
	tagSize    = 16
	// Overhead is what sealing adds to a value.
	Overhead = headerSize + nonceSize + tagSize
)

// Secrets seals, stores and opens secrets. It is safe for concurrent use.
type Secrets struct {
	st    store.Secrets
	aead  cipher.AEAD
	keyID [4]byte
	now   func() time.Time
}

// New returns Secrets kept in st under key.
func New(st store.Secrets, key Key) (*Secrets, error) {
	if !key.valid() {
		return nil, errors.New("secret.New: no key: load one with LoadKey")
	}
	block, err := aes.NewCipher(key.bytes())
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	s := &Secrets{st: st, aead: aead, now: func() time.Time { return time.Now().UTC() }}
	sum := sha256.Sum256(append([]byte("reins secret key id\x00"), key.bytes()...))
	copy(s.keyID[:], sum[:])
	return s, nil
}

// Set stores value as the secret name of tenant's scope ("" is the
// admin's own), replacing any value it had. name is an environment
// variable's name (egress.ValidSecretName); value is 1 to MaxValue bytes.
func (s *Secrets) Set(ctx context.Context, tenant, name string, value []byte) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if len(value) == 0 {
		return fmt.Errorf("secret %s: the value is empty: give it on stdin (reins secret set %s): %w", name, name, errdefs.ErrInvalidArgument)
	}
	if len(value) > MaxValue {
		return fmt.Errorf("secret %s: a value of %d bytes is over the limit of %d KiB (%d bytes): %w",
			name, len(value), MaxValue>>10, MaxValue, errdefs.ErrTooLarge)
	}
	if err := s.checkCount(ctx, tenant, name); err != nil {
		return err
	}
	sealed, err := s.seal(tenant, name, value)
	if err != nil {
		return err
	}
	_, err = s.st.PutSecret(ctx, tenant, name, sealed, s.now())
	return err
}

// MaxPerScope is how many secrets one scope (a tenant, or the admin's own)
// may hold: their names and sealed values are the tenant's to make, and
// the service's disk is not.
const MaxPerScope = 256

// checkCount refuses a new name in a scope that holds MaxPerScope.
func (s *Secrets) checkCount(ctx context.Context, tenant, name string) error {
	list, err := s.st.ListSecrets(ctx, tenant)
	if err != nil {
		return err
	}
	if len(list) < MaxPerScope || slices.ContainsFunc(list, func(m store.SecretMeta) bool { return m.Name == name }) {
		return nil
	}
	return fmt.Errorf("secret %s: this scope already holds %d secrets, the most it may: remove some (reins secret rm): %w", name, MaxPerScope, errdefs.ErrResourceExhausted)
}

// Has reports whether tenant's scope holds a secret called name, without
// opening it.
func (s *Secrets) Has(ctx context.Context, tenant, name string) (bool, error) {
	if err := CheckName(name); err != nil {
		return false, err
	}
	list, err := s.st.ListSecrets(ctx, tenant)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(list, func(m store.SecretMeta) bool { return m.Name == name }), nil
}

// Get opens the secret name of tenant's scope, for the service's own use
// (the egress proxy, trusted tools): never send it to a caller.
func (s *Secrets) Get(ctx context.Context, tenant, name string) ([]byte, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	sealed, err := s.st.GetSecret(ctx, tenant, name)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, notFound(name)
	}
	if err != nil {
		return nil, err
	}
	return s.open(tenant, name, sealed)
}

// List returns the scope's secrets by name, without values; Size is the
// value's size.
func (s *Secrets) List(ctx context.Context, tenant string) ([]store.SecretMeta, error) {
	list, err := s.st.ListSecrets(ctx, tenant)
	if err != nil {
		return nil, err
	}
	for i := range list {
		list[i].Size = max(list[i].Size-Overhead, 0)
	}
	return list, nil
}

// Delete removes the secret name of tenant's scope.
func (s *Secrets) Delete(ctx context.Context, tenant, name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	err := s.st.DeleteSecret(ctx, tenant, name)
	if errors.Is(err, errdefs.ErrNotFound) {
		return notFound(name)
	}
	return err
}

// CheckName accepts the name of a secret: an environment variable's name
// in the sandbox (letters, digits and '_', not starting with a digit, at
// most 128 bytes).
func CheckName(name string) error {
	if egress.ValidSecretName(name) {
		return nil
	}
	shown := name
	if len(shown) > 40 {
		shown = shown[:40] + "..."
	}
	return fmt.Errorf("secret name %q (%d bytes): use letters, digits and '_', not starting with a digit, at most 128 bytes: %w",
		shown, len(name), errdefs.ErrInvalidArgument)
}

func notFound(name string) error {
	return errdefs.WithMessage(errdefs.ErrNotFound, fmt.Sprintf("secret %s not found: set it with \"reins secret set %s\"", name, name))
}

// additional is the data sealed along with a value: the header and the
// secret's place. Neither a scope nor a name holds a NUL.
func additional(header []byte, tenant, name string) []byte {
	ad := make([]byte, 0, len(header)+len(tenant)+1+len(name))
	ad = append(ad, header...)
	ad = append(ad, tenant...)
	ad = append(ad, 0)
	return append(ad, name...)
}

func (s *Secrets) seal(tenant, name string, value []byte) ([]byte, error) {
	out := make([]byte, headerSize+nonceSize, Overhead+len(value))
	out[0] = version
	copy(out[1:headerSize], s.keyID[:])
	if _, err := rand.Read(out[headerSize:]); err != nil {
		return nil, fmt.Errorf("secret %s: a nonce: %w", name, err)
	}
	nonce := out[headerSize : headerSize+nonceSize]
	return s.aead.Seal(out, nonce, value, additional(out[:headerSize], tenant, name)), nil
}

func (s *Secrets) open(tenant, name string, sealed []byte) ([]byte, error) {
	if len(sealed) < Overhead || sealed[0] != version {
		return nil, fmt.Errorf("secret %s cannot be opened: its stored form is not one this reins writes (corrupt, or from a newer reins): set it again with \"reins secret set %s\": %w",
			name, name, errdefs.ErrFailedPrecondition)
	}
	if [4]byte(sealed[1:headerSize]) != s.keyID {
		return nil, fmt.Errorf("secret %s was sealed with another key than the service's (was the data dir's secret.key replaced?): restore that key, or set the secret again with \"reins secret set %s\": %w",
			name, name, errdefs.ErrFailedPrecondition)
	}
	nonce := sealed[headerSize : headerSize+nonceSize]
	v, err := s.aead.Open(nil, nonce, sealed[headerSize+nonceSize:], additional(sealed[:headerSize], tenant, name))
	if err != nil {
		return nil, fmt.Errorf("secret %s cannot be opened: its stored value was altered, or copied from another tenant or name: set it again with \"reins secret set %s\": %w",
			name, name, errdefs.ErrFailedPrecondition)
	}
	return v, nil
}
