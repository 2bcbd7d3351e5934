package attest

import (
	"bytes"
	"crypto"
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
	"slices"
	"strings"
	"testing"

	"filippo.io/mldsa"
	mldsax509 "filippo.io/mldsa/x509"
)

func TestGenerateAndLoadKey(t *testing.T) {
	for _, alg := range Algorithms() {
		t.Run(alg, func(t *testing.T) { testGenerateAndLoadKey(t, alg) })
	}
	if _, err := GenerateKey("ml-dsa-44", filepath.Join(t.TempDir(), "k"), filepath.Join(t.TempDir(), "k.pub")); err == nil || !strings.Contains(err.Error(), `"ml-dsa-44"`) {
		t.Errorf("unknown algorithm: %v", err)
	}
}

func testGenerateAndLoadKey(t *testing.T, alg string) {
	dir := t.TempDir()
	priv, pub := filepath.Join(dir, "seal.key"), filepath.Join(dir, "seal.key.pub")
	id, err := GenerateKey(alg, priv, pub)
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
	if !pk.Equal(s.Public()) || s.KeyID() != id || KeyID(pk) != id || pk.Alg() != alg || s.Alg() != alg {
		t.Errorf("loaded keys disagree: signer %s, public %s, generated %s", s.KeyID(), KeyID(pk), id)
	}
	// The key ID is ALG:SHA-256 of the DER blocks of the public key file,
	// in order; each block parses with the standard library (ed25519) or
	// the ML-DSA package under RFC 9881's OID.
	var der []byte
	var algs []string
	for rest := pemPub; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		der = append(der, b.Bytes...)
		k, err := mldsax509.ParsePKIXPublicKey(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		switch k := k.(type) {
		case ed25519.PublicKey:
			algs = append(algs, AlgEd25519)
		case *mldsa.PublicKey:
			if k.Parameters() != mldsa.MLDSA65() {
				t.Errorf("ML-DSA key of %s", k.Parameters())
			}
			algs = append(algs, AlgMLDSA65)
		}
	}
	want := map[string][]string{AlgEd25519: {AlgEd25519}, AlgMLDSA65: {AlgMLDSA65}, AlgHybrid: {AlgEd25519, AlgMLDSA65}}[alg]
	if !slices.Equal(algs, want) {
		t.Errorf("public key file holds %v, want %v", algs, want)
	}
	sum := sha256.Sum256(der)
	if id != alg+":"+hex.EncodeToString(sum[:]) {
		t.Errorf("KeyID %s is not %s: and the SHA-256 of the PKIX DER", id, alg)
	}
	if !bytes.Equal(pk.Bytes(), der) {
		t.Error("Bytes is not the PKIX DER of the key file")
	}
	if p2, err := ParsePublicKey(pk.Bytes()); err != nil || !p2.Equal(pk) {
		t.Errorf("ParsePublicKey(Bytes): %v", err)
	}
	// The ML-DSA private key is in the seed form of RFC 9881: [0] IMPLICIT
	// OCTET STRING of 32 bytes, so the PKCS #8 is 54 bytes.
	for rest := pemPriv; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if k, _ := mldsax509.ParsePKCS8PrivateKey(b.Bytes); k != nil {
			if _, ok := k.(*mldsa.PrivateKey); ok && len(b.Bytes) != 54 {
				t.Errorf("ML-DSA PKCS #8 of %d bytes, not the seed form", len(b.Bytes))
			}
		}
	}
	// Each block is byte for byte the form GenerateKey's doc gives.
	prefixes := map[string][2]string{
		AlgEd25519: {"302e020100300506032b657004220420", "302a300506032b6570032100"},
		AlgMLDSA65: {"3034020100300b060960864801650304031204228020", "308207b2300b0609608648016503040312038207a100"},
	}
	sizes := map[string][2]int{AlgEd25519: {32, 32}, AlgMLDSA65: {32, 1952}}
	for f, data := range [][]byte{pemPriv, pemPub} {
		i := 0
		for rest := data; ; i++ {
			var b *pem.Block
			if b, rest = pem.Decode(rest); b == nil {
				break
			}
			pre, n := prefixes[want[i]][f], sizes[want[i]][f]
			if got := hex.EncodeToString(b.Bytes); !strings.HasPrefix(got, pre) || len(b.Bytes) != len(pre)/2+n {
				t.Errorf("block %d of %s is %s…, %d bytes; want %s and %d bytes", i, []string{"private", "public"}[f], got[:min(len(got), len(pre))], len(b.Bytes), pre, len(pre)/2+n)
			}
		}
		if i != len(want) {
			t.Errorf("%d blocks, want %d", i, len(want))
		}
	}
	if _, err := GenerateKey(alg, priv, filepath.Join(dir, "other.pub")); err == nil {
		t.Error("GenerateKey overwrote a private key")
	}
	if _, err := os.Stat(filepath.Join(dir, "other.pub")); !os.IsNotExist(err) {
		t.Error("GenerateKey wrote a public key after failing")
	}
	if _, err := GenerateKey(alg, filepath.Join(dir, "k2"), pub); err == nil {
		t.Error("GenerateKey overwrote a public key")
	}
	if _, err := os.Stat(filepath.Join(dir, "k2")); !os.IsNotExist(err) {
		t.Error("GenerateKey left a private key behind after failing")
	}
	// A private key where a public one goes, and the reverse, is refused.
	if _, err := LoadPublicKey(priv); err == nil {
		t.Error("private key file loaded as a public key")
	}
	if err := os.Chmod(pub, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPrivateKey(pub); err == nil {
		t.Error("public key file loaded as a private key")
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
	ed := ed25519.NewKeyFromSeed(make([]byte, 32))
	ml, err := mldsa.NewPrivateKey(mldsa.MLDSA65(), make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	ml44, err := mldsa.NewPrivateKey(mldsa.MLDSA44(), make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for name, keys := range map[string][]crypto.Signer{
		"short ed25519":  {ed[:10]},
		"none":           nil,
		"ML-DSA-44":      {ml44},
		"ecdsa":          {ec},
		"two ed25519":    {ed, ed},
		"hybrid swapped": {ml, ed},
		"three":          {ed, ml, ml},
	} {
		if _, err := NewSigner(keys...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for _, c := range []struct {
		keys []crypto.Signer
		alg  string
	}{{[]crypto.Signer{ed}, AlgEd25519}, {[]crypto.Signer{ml}, AlgMLDSA65}, {[]crypto.Signer{ed, ml}, AlgHybrid}} {
		s, err := NewSigner(c.keys...)
		if err != nil || s.Alg() != c.alg || !strings.HasPrefix(s.KeyID(), c.alg+":") {
			t.Errorf("NewSigner of %s: %v", c.alg, err)
		}
	}
	if KeyID(PublicKey{}) != "" || !(PublicKey{}).IsZero() {
		t.Error("the zero key has an ID")
	}
}

// TestLoadKeyAlgorithms refuses key files of algorithms and shapes this
// package does not sign with, naming the algorithm.
func TestLoadKeyAlgorithms(t *testing.T) {
	ml44, _ := mldsa.GenerateKey(mldsa.MLDSA44())
	ml87, _ := mldsa.GenerateKey(mldsa.MLDSA87())
	ml65, _ := mldsa.GenerateKey(mldsa.MLDSA65())
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	// pemOf returns a PEM file of one block of type typ per key, each the
	// key's DER by marshal.
	pemOf := func(typ string, marshal func(any) ([]byte, error), keys ...any) []byte {
		var out []byte
		for _, k := range keys {
			der, err := marshal(k)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})...)
		}
		return out
	}
	privPEM := func(keys ...any) []byte { return pemOf("PRIVATE KEY", mldsax509.MarshalPKCS8PrivateKey, keys...) }
	pubPEM := func(keys ...any) []byte { return pemOf("PUBLIC KEY", mldsax509.MarshalPKIXPublicKey, keys...) }
	edPub := ed.Public()
	for _, c := range []struct {
		name, want string
		priv       []byte
		pub        []byte
	}{
		{"ML-DSA-44", "ML-DSA-44", privPEM(ml44), pubPEM(ml44.PublicKey())},
		{"ML-DSA-87", "ML-DSA-87", privPEM(ml87), pubPEM(ml87.PublicKey())},
		{"ecdsa", "ECDSA", privPEM(ec), pubPEM(&ec.PublicKey)},
		{"hybrid swapped", "an ed25519 key then an ML-DSA-65 key", privPEM(ml65, ed), pubPEM(ml65.PublicKey(), edPub)},
		{"two ed25519", "an ed25519 key then an ML-DSA-65 key", privPEM(ed, ed), pubPEM(edPub, edPub)},
		{"three blocks", "more than two", privPEM(ed, ml65, ml65), pubPEM(edPub, ml65.PublicKey(), ml65.PublicKey())},
		{"hybrid with ML-DSA-44", "ML-DSA-44", privPEM(ed, ml44), pubPEM(edPub, ml44.PublicKey())},
	} {
		if _, err := LoadPrivateKey(writeFile(t, "k", 0o600, c.priv)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s private key: %v, want an error naming %q", c.name, err, c.want)
		}
		if _, err := LoadPublicKey(writeFile(t, "k.pub", 0o644, c.pub)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s public key: %v, want an error naming %q", c.name, err, c.want)
		}
	}
	// The encoding is one DER per key, nothing trailing, and in its one form.
	good := testSignerOf(t, AlgHybrid, 1).Public().Bytes()
	for name, b := range map[string][]byte{
		"trailing byte": append(clone(good), 0),
		"truncated":     good[:len(good)-1],
		"empty":         nil,
	} {
		if _, err := ParsePublicKey(b); err == nil {
			t.Errorf("%s: ParsePublicKey accepted it", name)
		}
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
