package attest

import (
	"bytes"
	"crypto"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/asn1"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"filippo.io/mldsa"
	mldsax509 "filippo.io/mldsa/x509"
)

// The signature algorithms of a key, as its key ID and a head name them.
const (
	// AlgEd25519 is Ed25519 (RFC 8032).
	AlgEd25519 = "ed25519"
	// AlgMLDSA65 is ML-DSA-65 (FIPS 204), deterministic like ed25519 (the
	// same artifact signs to the same bytes), with an empty context.
	AlgMLDSA65 = "ml-dsa-65"
	// AlgHybrid is an ed25519 key and an ML-DSA-65 key together: every
	// envelope carries a signature of each, and verifies only when both do.
	AlgHybrid = "hybrid"
)

// Algorithms lists the signature algorithms this package signs and
// verifies with, ed25519 (the default) first.
func Algorithms() []string { return []string{AlgEd25519, AlgMLDSA65, AlgHybrid} }

// maxKeyFile bounds the size of a key file read from disk.
const maxKeyFile = 64 << 10

// PublicKey is a public key of one of the Algorithms: what every verifier
// in this package takes. LoadPublicKey, ParsePublicKey and Signer.Public
// return one; its zero value is no key, which verifies nothing.
//
// Its encoding (Bytes) is the DER SubjectPublicKeyInfo (PKIX, RFC 5280) of
// the key, with the OID of RFC 8410 for ed25519 and of RFC 9881
// (2.16.840.1.101.3.4.3.18) for ML-DSA-65; a hybrid key's encoding is its
// ed25519 key's followed by its ML-DSA-65 key's. Its key ID is
//
//	ALG ":" HEX
//
// with ALG its algorithm and HEX the lowercase hex SHA-256 of its encoding,
// for example "ed25519:" followed by 64 hex digits. Every signed artifact
// holds the key ID of the key that signed it, so the algorithm is bound in
// what is signed: an artifact verifies only under a key of the algorithm
// its key ID names.
type PublicKey struct {
	alg   string
	id    string
	enc   []byte
	ed    ed25519.PublicKey // ed25519 and hybrid
	ml    *mldsa.PublicKey  // ml-dsa-65 and hybrid
	parts []PublicKey       // hybrid: the ed25519 then the ML-DSA-65 key
}

// Alg returns the key's algorithm, one of Algorithms; "" for no key.
func (k PublicKey) Alg() string { return k.alg }

// KeyID returns the key's ID (see PublicKey); "" for no key.
func (k PublicKey) KeyID() string { return k.id }

// IsZero reports whether k is no key.
func (k PublicKey) IsZero() bool { return k.alg == "" }

// Bytes returns a copy of the key's encoding (see PublicKey), which
// ParsePublicKey reads.
func (k PublicKey) Bytes() []byte { return clone(k.enc) }

// Equal reports whether k and o are the same key.
func (k PublicKey) Equal(o PublicKey) bool { return k.alg == o.alg && bytes.Equal(k.enc, o.enc) }

// MarshalText returns the standard base64 (with padding) of Bytes.
func (k PublicKey) MarshalText() ([]byte, error) {
	if k.IsZero() {
		return nil, errors.New("encode public key: no key")
	}
	return base64.StdEncoding.AppendEncode(nil, k.enc), nil
}

// UnmarshalText reads what MarshalText writes.
func (k *PublicKey) UnmarshalText(b []byte) error {
	der, err := base64.StdEncoding.DecodeString(string(b))
	if err != nil {
		return fmt.Errorf("parse public key: %w", err)
	}
	p, err := ParsePublicKey(der)
	if err != nil {
		return err
	}
	*k = p
	return nil
}

// components returns the single-algorithm keys whose signatures, in this
// order, an envelope signed by k carries.
func (k PublicKey) components() []PublicKey {
	if k.alg == AlgHybrid {
		return k.parts
	}
	return []PublicKey{k}
}

// verifySig reports whether sig is a valid signature of msg by k, a
// single-algorithm key.
func (k PublicKey) verifySig(msg, sig []byte) bool {
	switch k.alg {
	case AlgEd25519:
		return len(sig) == ed25519.SignatureSize && ed25519.Verify(k.ed, msg, sig)
	case AlgMLDSA65:
		return len(sig) == mldsa.MLDSA65SignatureSize && mldsa.Verify(k.ml, msg, sig, nil) == nil
	}
	return false
}

// sigSize is the size of a signature by a key of alg, a single algorithm;
// 0 for any other.
func sigSize(alg string) int {
	switch alg {
	case AlgEd25519:
		return ed25519.SignatureSize
	case AlgMLDSA65:
		return mldsa.MLDSA65SignatureSize
	}
	return 0
}

// singleKey returns the PublicKey of one ed25519 or ML-DSA-65 key.
func singleKey(pub crypto.PublicKey) (PublicKey, error) {
	k := PublicKey{}
	switch p := pub.(type) {
	case ed25519.PublicKey:
		if len(p) != ed25519.PublicKeySize {
			return k, fmt.Errorf("ed25519 public key of %d bytes", len(p))
		}
		k.alg, k.ed = AlgEd25519, clone(p)
	case *mldsa.PublicKey:
		if p.Parameters() != mldsa.MLDSA65() {
			return k, fmt.Errorf("%s keys are not supported (this version reads %s)", p.Parameters(), strings.Join(Algorithms(), ", "))
		}
		k.alg, k.ml = AlgMLDSA65, p
	default:
		return k, fmt.Errorf("%s keys are not supported (this version reads %s)", keyKind(pub), strings.Join(Algorithms(), ", "))
	}
	der, err := mldsax509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return PublicKey{}, err
	}
	k.enc = der
	k.id = keyID(k.alg, der)
	return k, nil
}

// hybridKey returns the hybrid PublicKey of ed and ml.
func hybridKey(ed, ml PublicKey) PublicKey {
	enc := append(clone(ed.enc), ml.enc...)
	return PublicKey{alg: AlgHybrid, id: keyID(AlgHybrid, enc), enc: enc, ed: ed.ed, ml: ml.ml, parts: []PublicKey{ed, ml}}
}

func keyID(alg string, enc []byte) string {
	sum := sha256.Sum256(enc)
	return alg + ":" + hex.EncodeToString(sum[:])
}

// keyKind names a key of a kind this package does not sign with, for a
// message.
func keyKind(k any) string {
	switch p := k.(type) {
	case *ecdsa.PublicKey, *ecdsa.PrivateKey:
		return "ECDSA"
	case *rsa.PublicKey, *rsa.PrivateKey:
		return "RSA"
	case *ecdh.PublicKey, *ecdh.PrivateKey:
		return "X25519 or ECDH"
	case *mldsa.PrivateKey:
		return p.PublicKey().Parameters().String()
	}
	return "such"
}

// KeyID returns pub.KeyID().
func KeyID(pub PublicKey) string { return pub.KeyID() }

// keyIDAlg returns the algorithm a key ID names, checking the ID's form.
func keyIDAlg(id string) (string, error) {
	alg, h, ok := strings.Cut(id, ":")
	if !ok {
		return "", fmt.Errorf("key id %q is not ALGORITHM:HEX", id)
	}
	switch alg {
	case AlgEd25519, AlgMLDSA65, AlgHybrid:
	default:
		return "", fmt.Errorf("key id %q names the unknown algorithm %q (this version reads %s)", id, alg, strings.Join(Algorithms(), ", "))
	}
	if err := checkHex("key id", h); err != nil {
		return "", fmt.Errorf("key id %q: %w", id, err)
	}
	return alg, nil
}

// checkKeyID requires id to be a key ID of a known algorithm.
func checkKeyID(id string) error {
	_, err := keyIDAlg(id)
	return err
}

// ParsePublicKey parses the encoding of a public key (see PublicKey): one
// DER PKIX ed25519 or ML-DSA-65 key, or an ed25519 key's followed by an
// ML-DSA-65 key's (hybrid). It refuses any other key, order or trailing
// data, and a DER that is not the key's one encoding.
func ParsePublicKey(der []byte) (PublicKey, error) {
	var parts []PublicKey
	for rest := der; len(rest) > 0; {
		if len(parts) == 2 {
			return PublicKey{}, errors.New("parse public key: more than two keys")
		}
		var raw asn1.RawValue
		next, err := asn1.Unmarshal(rest, &raw)
		if err != nil {
			return PublicKey{}, fmt.Errorf("parse public key: %w", err)
		}
		one := rest[:len(rest)-len(next)]
		k, err := mldsax509.ParsePKIXPublicKey(one)
		if err != nil {
			return PublicKey{}, fmt.Errorf("parse public key: %w", err)
		}
		p, err := singleKey(k)
		if err != nil {
			return PublicKey{}, fmt.Errorf("parse public key: %w", err)
		}
		if !bytes.Equal(p.enc, one) {
			return PublicKey{}, errors.New("parse public key: not in its one DER encoding")
		}
		parts = append(parts, p)
		rest = next
	}
	return combine(parts, "parse public key")
}

// combine returns the key of parts: one key, or an ed25519 and an
// ML-DSA-65 key in this order (hybrid).
func combine(parts []PublicKey, what string) (PublicKey, error) {
	switch {
	case len(parts) == 1:
		return parts[0], nil
	case len(parts) == 2 && parts[0].alg == AlgEd25519 && parts[1].alg == AlgMLDSA65:
		return hybridKey(parts[0], parts[1]), nil
	case len(parts) == 2:
		return PublicKey{}, fmt.Errorf("%s: two keys of %s and %s: a hybrid key is an ed25519 key then an ML-DSA-65 key", what, parts[0].alg, parts[1].alg)
	}
	return PublicKey{}, fmt.Errorf("%s: no key", what)
}

// Signer signs with the private key of one of the Algorithms (two keys for
// hybrid), loaded once and then pinned for the life of the value.
type Signer struct {
	pub PublicKey
	ed  ed25519.PrivateKey // ed25519 and hybrid
	ml  *mldsa.PrivateKey  // ml-dsa-65 and hybrid
}

// NewSigner returns a Signer holding keys: one ed25519.PrivateKey
// (algorithm ed25519), one *mldsa.PrivateKey of ML-DSA-65 (ml-dsa-65), or
// an ed25519 key and an ML-DSA-65 key in this order (hybrid).
func NewSigner(keys ...crypto.Signer) (*Signer, error) {
	s := &Signer{}
	var parts []PublicKey
	for _, key := range keys {
		switch k := key.(type) {
		case ed25519.PrivateKey:
			if len(k) != ed25519.PrivateKeySize {
				return nil, fmt.Errorf("new signer: ed25519 private key of %d bytes", len(k))
			}
			s.ed = clone(k)
		case *mldsa.PrivateKey:
			if k == nil {
				return nil, errors.New("new signer: no ML-DSA key")
			}
			s.ml = k
		}
		p, err := singleKey(key.Public())
		if err != nil {
			return nil, fmt.Errorf("new signer: %w", err)
		}
		parts = append(parts, p)
	}
	if len(parts) > 2 {
		return nil, fmt.Errorf("new signer: %d keys", len(parts))
	}
	pub, err := combine(parts, "new signer")
	if err != nil {
		return nil, err
	}
	s.pub = pub
	return s, nil
}

// newRandomSigner returns a Signer of a new random key of alg.
func newRandomSigner(alg string) (*Signer, error) {
	var keys []crypto.Signer
	if alg == AlgEd25519 || alg == AlgHybrid {
		_, k, err := ed25519.GenerateKey(nil)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	if alg == AlgMLDSA65 || alg == AlgHybrid {
		k, err := mldsa.GenerateKey(mldsa.MLDSA65())
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	if keys == nil {
		return nil, fmt.Errorf("unknown key algorithm %q (choose %s)", alg, strings.Join(Algorithms(), ", "))
	}
	return NewSigner(keys...)
}

// Public returns the signer's public key.
func (s *Signer) Public() PublicKey { return s.pub }

// KeyID returns the ID of the signer's public key.
func (s *Signer) KeyID() string { return s.pub.id }

// Alg returns the signer's algorithm.
func (s *Signer) Alg() string { return s.pub.alg }

// sign returns the signatures of msg an envelope carries, one for each of
// the key's components in order.
func (s *Signer) sign(msg []byte) ([]signature, error) {
	var sigs []signature
	for _, p := range s.pub.components() {
		var sig []byte
		switch p.alg {
		case AlgEd25519:
			sig = ed25519.Sign(s.ed, msg)
		case AlgMLDSA65:
			var err error
			if sig, err = s.ml.SignDeterministic(msg, nil); err != nil {
				return nil, fmt.Errorf("sign: %w", err)
			}
		}
		sigs = append(sigs, signature{KeyID: p.id, Sig: sig})
	}
	return sigs, nil
}

// derBlocks returns the DER PKCS #8 private keys of the signer's
// components, in order.
func (s *Signer) derBlocks() ([][]byte, error) {
	var out [][]byte
	for _, p := range s.pub.components() {
		var k any = s.ed
		if p.alg == AlgMLDSA65 {
			k = s.ml
		}
		der, err := mldsax509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			return nil, err
		}
		out = append(out, der)
	}
	return out, nil
}

// GenerateKey makes a new key pair of alg (one of Algorithms) and writes
// the private key to privPath with mode 0600 and the public key to pubPath
// with mode 0644. It refuses to overwrite either file, and returns the key
// ID.
//
// Both files are PEM (RFC 7468). A private key file holds one "PRIVATE
// KEY" block per component key, a public key file one "PUBLIC KEY" block
// per component key: one block for ed25519 and ml-dsa-65, two for hybrid,
// the ed25519 key's first. Each block holds its key's standard DER, in hex:
//
//	ed25519 private    302e020100300506032b657004220420 SEED(32)        RFC 8410 PKCS #8
//	ed25519 public     302a300506032b6570032100 KEY(32)                 RFC 8410 PKIX
//	ml-dsa-65 private  3034020100300b0609608648016503040312 04228020 SEED(32)
//	                   RFC 9881 PKCS #8, the seed form ([0] IMPLICIT seed)
//	ml-dsa-65 public   308207b2300b0609608648016503040312 038207a100 KEY(1952)
//	                   RFC 9881 PKIX, OID 2.16.840.1.101.3.4.3.18
//
// The public key's encoding (see PublicKey) is its blocks' DER in file
// order. A hybrid key is two blocks rather than one composite because its
// envelopes carry two separate signatures (see envelope): each block is
// the standard form of the key that makes one of them, so each signature
// can be checked on its own with tools that read that form, and no draft
// composite OID, whose signatures these are not, is claimed. The ed25519
// files are the forms Sigstore tooling reads (cosign
// verify-blob-attestation --key pubPath).
func GenerateKey(alg, privPath, pubPath string) (keyID string, err error) {
	s, err := newRandomSigner(alg)
	if err != nil {
		return "", fmt.Errorf("generate key: %w", err)
	}
	ders, err := s.derBlocks()
	if err != nil {
		return "", fmt.Errorf("generate key: %w", err)
	}
	var priv, pub []byte
	for _, der := range ders {
		priv = append(priv, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})...)
	}
	for _, p := range s.pub.components() {
		pub = append(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: p.enc})...)
	}
	if err := writeNew(privPath, 0o600, priv); err != nil {
		return "", err
	}
	if err := writeNew(pubPath, 0o644, pub); err != nil {
		os.Remove(privPath)
		return "", err
	}
	return s.KeyID(), nil
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

// readPEM reads the one or two PEM blocks of type typ from the regular
// file at path, refusing files larger than maxKeyFile. With private set it
// also refuses a file that group or others may access.
func readPEM(path, typ string, private bool) ([][]byte, error) {
	// Stat first so a FIFO or device is never opened.
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		if private {
			return nil, fmt.Errorf("read key %q: %w (make a key pair with `layerseal keygen --out %s`)", path, fs.ErrNotExist, path)
		}
		return nil, fmt.Errorf("read key %q: %w (keygen writes the public key beside the private one, as KEY.pub)", path, fs.ErrNotExist)
	}
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
	if private {
		if err := checkKeyLinks(path, ofi); err != nil {
			return nil, err
		}
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("read key %q: %w", path, err)
	}
	if len(data) > maxKeyFile {
		return nil, fmt.Errorf("read key %q: larger than %d bytes", path, maxKeyFile)
	}
	var ders [][]byte
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != typ {
			return nil, fmt.Errorf("read key %q: PEM block type %q, want %q", path, block.Type, typ)
		}
		if len(block.Headers) != 0 {
			return nil, fmt.Errorf("read key %q: PEM block has headers", path)
		}
		if len(ders) == 2 {
			return nil, fmt.Errorf("read key %q: more than two PEM blocks (a hybrid key has two)", path)
		}
		ders = append(ders, block.Bytes)
	}
	if ders == nil {
		return nil, fmt.Errorf("read key %q: no PEM block", path)
	}
	return ders, nil
}

// LoadPrivateKey reads a private key file as GenerateKey writes it and
// returns a Signer holding it. It refuses a file that is missing,
// unreadable, not regular, accessible by group or others, with more than
// one name (ErrKeyLinked), of another PEM type, or holding a key of
// another algorithm (named in the error).
func LoadPrivateKey(path string) (*Signer, error) {
	ders, err := readPEM(path, "PRIVATE KEY", true)
	if err != nil {
		return nil, err
	}
	var keys []crypto.Signer
	for _, der := range ders {
		k, err := mldsax509.ParsePKCS8PrivateKey(der)
		if err != nil {
			return nil, fmt.Errorf("read key %q: %w", path, err)
		}
		switch k := k.(type) {
		case ed25519.PrivateKey:
			keys = append(keys, k)
		case *mldsa.PrivateKey:
			keys = append(keys, k)
		default:
			return nil, fmt.Errorf("read key %q: %s keys are not supported (this version signs with %s)", path, keyKind(k), strings.Join(Algorithms(), ", "))
		}
	}
	s, err := NewSigner(keys...)
	if err != nil {
		return nil, fmt.Errorf("read key %q: %w", path, err)
	}
	return s, nil
}

// LoadPublicKey reads a public key file as GenerateKey writes it.
func LoadPublicKey(path string) (PublicKey, error) {
	ders, err := readPEM(path, "PUBLIC KEY", false)
	if err != nil {
		return PublicKey{}, err
	}
	k, err := ParsePublicKey(bytes.Join(ders, nil))
	if err != nil {
		return PublicKey{}, fmt.Errorf("read key %q: %w", path, err)
	}
	return k, nil
}
