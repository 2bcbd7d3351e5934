package attest

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestGenerateAndLoadKey(t *testing.T) {
	dir := t.TempDir()
	priv, pub := filepath.Join(dir, "seal.key"), filepath.Join(dir, "seal.key.pub")
	id, err := GenerateKey(priv, pub)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" {
		for path, mode := range map[string]os.FileMode{priv: 0o600, pub: 0o644} {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != mode {
				t.Errorf("%s has mode %v, want %v", filepath.Base(path), fi.Mode().Perm(), mode)
			}
		}
	}
	pemPriv, _ := os.ReadFile(priv)
	pemPub, _ := os.ReadFile(pub)
	if !strings.HasPrefix(string(pemPriv), "-----BEGIN PRIVATE KEY-----\n") || !strings.HasPrefix(string(pemPub), "-----BEGIN PUBLIC KEY-----\n") {
		t.Errorf("unexpected PEM:\n%s%s", pemPriv, pemPub)
	}
	s, err := LoadPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := LoadPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	if !pk.Equal(s.Public()) || s.KeyID() != id || KeyID(pk) != id {
		t.Errorf("loaded keys disagree: signer %s, public %s, generated %s", s.KeyID(), KeyID(pk), id)
	}
	block, _ := pem.Decode(pemPub)
	sum := sha256.Sum256(block.Bytes)
	if id != hex.EncodeToString(sum[:]) {
		t.Errorf("KeyID %s is not the SHA-256 of the PKIX DER", id)
	}
	if _, err := GenerateKey(priv, filepath.Join(dir, "other.pub")); err == nil {
		t.Error("GenerateKey overwrote a private key")
	}
	if _, err := os.Stat(filepath.Join(dir, "other.pub")); !os.IsNotExist(err) {
		t.Error("GenerateKey wrote a public key after failing")
	}
	if _, err := GenerateKey(filepath.Join(dir, "k2"), pub); err == nil {
		t.Error("GenerateKey overwrote a public key")
	}
	if _, err := os.Stat(filepath.Join(dir, "k2")); !os.IsNotExist(err) {
		t.Error("GenerateKey left a private key behind after failing")
	}
}

func writeFile(t *testing.T, name string, mode os.FileMode, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadPrivateKeyRefuses(t *testing.T) {
	_, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	edDER, _ := x509.MarshalPKCS8PrivateKey(edPriv)
	ecPriv, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecDER, _ := x509.MarshalPKCS8PrivateKey(ecPriv)
	good := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: edDER})

	if _, err := LoadPrivateKey(writeFile(t, "ok", 0o600, good)); err != nil {
		t.Fatalf("good key refused: %v", err)
	}
	if _, err := LoadPrivateKey(writeFile(t, "ro", 0o400, good)); err != nil {
		t.Fatalf("read-only key refused: %v", err)
	}
	if runtime.GOOS != "windows" {
		path := writeFile(t, "open", 0o640, good)
		_, err := LoadPrivateKey(path)
		if err == nil || !strings.Contains(err.Error(), "chmod 600") || !strings.Contains(err.Error(), "0640") || !strings.Contains(err.Error(), path) {
			t.Errorf("group-readable key: %v", err)
		}
		if _, err := LoadPrivateKey(writeFile(t, "other", 0o604, good)); err == nil {
			t.Error("other-readable key accepted")
		}
	}
	cases := map[string][]byte{
		"wrong PEM type":   pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: edDER}),
		"ecdsa key":        pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER}),
		"not PEM":          []byte("hello"),
		"garbage DER":      pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1, 2, 3}}),
		"two blocks":       append(append([]byte(nil), good...), good...),
		"public key block": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: edDER}),
		"too large":        append(make([]byte, maxKeyFile), good...),
	}
	for name, data := range cases {
		if _, err := LoadPrivateKey(writeFile(t, "k", 0o600, data)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := LoadPrivateKey(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing key: %v", err)
	}
	if _, err := LoadPrivateKey(t.TempDir()); err == nil {
		t.Error("directory accepted as key")
	}
	ecPubDER, _ := x509.MarshalPKIXPublicKey(&ecPriv.PublicKey)
	if _, err := LoadPublicKey(writeFile(t, "p", 0o644, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: ecPubDER}))); err == nil {
		t.Error("ecdsa public key accepted")
	}
	if _, err := LoadPublicKey(writeFile(t, "p", 0o644, good)); err == nil {
		t.Error("private key accepted as public key")
	}
}

func TestNewSigner(t *testing.T) {
	if _, err := NewSigner(make([]byte, 10)); err == nil {
		t.Error("short key accepted")
	}
	if KeyID(make([]byte, 5)) != "" {
		t.Error("KeyID of a short key is not empty")
	}
}

func TestNewSessionID(t *testing.T) {
	a, b := NewSessionID(), NewSessionID()
	if err := checkSessionID(a); err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Errorf("two session IDs are equal: %s", a)
	}
}
