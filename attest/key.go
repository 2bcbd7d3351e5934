package attest

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"os"
)

// maxKeyFile bounds the size of a key file read from disk.
const maxKeyFile = 64 << 10

// GenerateKey makes a new ed25519 key pair and writes the private key as a
// PEM "PRIVATE KEY" block (PKCS #8) to privPath with mode 0600 and the public
// key as a PEM "PUBLIC KEY" block (PKIX) to pubPath with mode 0644, the
// forms Sigstore tooling reads (cosign verify-blob-attestation --key
// pubPath). It refuses to overwrite either file, and returns the key ID.
func GenerateKey(privPath, pubPath string) (keyID string, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", fmt.Errorf("generate key: %w", err)
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return "", fmt.Errorf("generate key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("generate key: %w", err)
	}
	if err := writeNew(privPath, 0o600, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER})); err != nil {
		return "", err
	}
	if err := writeNew(pubPath, 0o644, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})); err != nil {
		os.Remove(privPath)
		return "", err
	}
	return KeyID(pub), nil
}

// writeNew creates path (which must not exist) with mode perm, writes data
// and syncs it.
func writeNew(path string, perm os.FileMode, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return fmt.Errorf("create key file: %w", err)
	}
	// Chmod undoes a umask that removed bits; it never widens beyond perm.
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("write key file %q: %w", path, err)
	}
	return nil
}

// readPEM reads the single PEM block of type typ from the regular file at
// path, refusing files larger than maxKeyFile. With private set it also
// refuses a file that group or others may access.
func readPEM(path, typ string, private bool) ([]byte, error) {
	// Stat first so a FIFO or device is never opened.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read key: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("read key %q: not a regular file (%s)", path, fi.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read key: %w", err)
	}
	defer f.Close()
	ofi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read key %q: %w", path, err)
	}
	if !os.SameFile(fi, ofi) {
		return nil, fmt.Errorf("read key %q: file replaced while opening", path)
	}
	if private && ofi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("read key %q: private key is accessible by group or others (mode %04o); run chmod 600 %q", path, ofi.Mode().Perm(), path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("read key %q: %w", path, err)
	}
	if len(data) > maxKeyFile {
		return nil, fmt.Errorf("read key %q: larger than %d bytes", path, maxKeyFile)
	}
	block, rest := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("read key %q: no PEM block", path)
	}
	if block.Type != typ {
		return nil, fmt.Errorf("read key %q: PEM block type %q, want %q", path, block.Type, typ)
	}
	if len(block.Headers) != 0 {
		return nil, fmt.Errorf("read key %q: PEM block has headers", path)
	}
	if p, _ := pem.Decode(rest); p != nil {
		return nil, fmt.Errorf("read key %q: more than one PEM block", path)
	}
	return block.Bytes, nil
}

// PublicKey is the key every verifier in this package takes: for now an
// ed25519 public key.
type PublicKey = ed25519.PublicKey

// Signer signs with one ed25519 private key, loaded once and then pinned
// for the life of the value.
type Signer struct {
	priv  ed25519.PrivateKey
	pub   ed25519.PublicKey
	keyID string
}

// NewSigner returns a Signer holding a copy of priv.
func NewSigner(priv ed25519.PrivateKey) (*Signer, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("new signer: ed25519 private key of %d bytes", len(priv))
	}
	priv = append(ed25519.PrivateKey(nil), priv...)
	pub := priv.Public().(ed25519.PublicKey)
	return &Signer{priv: priv, pub: pub, keyID: KeyID(pub)}, nil
}

// LoadPrivateKey reads a PEM PKCS #8 ed25519 private key, as written by
// GenerateKey, and returns a Signer holding it. It refuses a file that is
// missing, unreadable, not regular, accessible by group or others, of
// another PEM type, or holding another kind of key.
func LoadPrivateKey(path string) (*Signer, error) {
	der, err := readPEM(path, "PRIVATE KEY", true)
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("read key %q: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("read key %q: %T is not an ed25519 private key", path, k)
	}
	return NewSigner(priv)
}

// LoadPublicKey reads a PEM PKIX ed25519 public key, as written by
// GenerateKey.
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	der, err := readPEM(path, "PUBLIC KEY", false)
	if err != nil {
		return nil, err
	}
	return ParsePublicKey(der)
}

// ParsePublicKey parses a DER PKIX ed25519 public key.
func ParsePublicKey(der []byte) (ed25519.PublicKey, error) {
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("parse public key: %w", err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("parse public key: %T is not an ed25519 public key", k)
	}
	return pub, nil
}

// KeyID returns the ID of pub: the lowercase hex SHA-256 of its PKIX DER
// encoding. It returns "" for a key of the wrong size.
func KeyID(pub ed25519.PublicKey) string {
	if len(pub) != ed25519.PublicKeySize {
		return ""
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// Public returns the signer's public key.
func (s *Signer) Public() ed25519.PublicKey { return append(ed25519.PublicKey(nil), s.pub...) }

// KeyID returns the ID of the signer's public key.
func (s *Signer) KeyID() string { return s.keyID }

// sign returns the signature of msg.
func (s *Signer) sign(msg []byte) []byte { return ed25519.Sign(s.priv, msg) }
