package attest

import (
	"bytes"
	"errors"
	"strings"

	"github.com/go-json-experiment/json"
)

// SigstoreFile is the file name of a statement's Sigstore bundle, written
// beside StatementFile.
const SigstoreFile = "statement.sigstore.json"

// SigstoreMediaType is the media type of the Sigstore bundles SigstoreBundle
// writes: version 0.3 of the bundle format.
const SigstoreMediaType = "application/vnd.dev.sigstore.bundle.v0.3+json"

// ErrNoSigstore is returned by SigstoreBundle for a key whose signatures
// Sigstore's verifiers do not check: no bundle is written for it.
var ErrNoSigstore = errors.New("sigstore tooling cannot check this kind of signature")

// sigstoreKey reports whether Sigstore's verifiers check pub's signatures,
// and so whether a statement signed with it gets a Sigstore bundle. It is
// the one place that decides. Sigstore checks ed25519 signatures; it
// cannot check ML-DSA-65 ones, and so not a hybrid signature either, which
// needs both.
func sigstoreKey(pub PublicKey) bool { return pub.Alg() == AlgEd25519 }

// SigstoreBundle returns the file bytes of the Sigstore bundle of a signed
// statement's envelope file env, after checking env's signature with pub
// (a signature that does not verify is ErrNotVerified; an envelope that is
// not one is malformed). For a key Sigstore cannot check it returns
// ErrNoSigstore.
//
// The bundle repackages the envelope and adds nothing that is signed: the
// same payload and signature, and the key ID as the hint of the public key
// that checks it, so `cosign verify-blob-attestation --bundle` (which takes
// the key with --key) reads it with no transparency log entry and no
// timestamp. Its file form is fixed, byte for byte (without the line
// breaks, followed by one newline):
//
//	{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json",
//	 "verificationMaterial":{"publicKey":{"hint":"<key id>"}},
//	 "dsseEnvelope":{"payload":"<base64>","payloadType":"application/vnd.in-toto+json",
//	  "signatures":[{"sig":"<base64>"}]}}
//
// with base64 the standard alphabet with padding. The signature names no
// key ID: a DSSE verifier given the public key, as Sigstore's is, skips a
// signature whose key ID is not the key's SSH fingerprint. The key ID is
// not covered by the signature, so leaving it out changes nothing signed.
//
// It costs what checking the signature does (a strict parse of env and one
// signature check: 0.26 to 0.28 s for a statement of 100,000 files), and
// memory for one copy of env.
func SigstoreBundle(env []byte, pub PublicKey) ([]byte, error) {
	if !sigstoreKey(pub) {
		return nil, ErrNoSigstore
	}
	if _, err := open(env, MaxStatementSize, pub); err != nil {
		return nil, err
	}
	// env is now known to be in its one spelling (see envelopeFile), so
	// its base64 members are copied as they are, not decoded and encoded
	// again; the key ID is KeyID(pub).
	const (
		envPayload = `{"payloadType":"` + PayloadType + `","payload":"`
		envKeyID   = `","signatures":[{"keyid":"`
		envSig     = `","sig":"`
		envEnd     = `"}]}` + "\n"
	)
	rest, ok := bytes.CutPrefix(env, []byte(envPayload))
	i := bytes.Index(rest, []byte(envKeyID))
	j := bytes.LastIndex(rest, []byte(envSig))
	if !ok || i < 0 || j < i || !bytes.HasSuffix(rest, []byte(envEnd)) {
		return nil, malformed("envelope is not in its one valid encoding")
	}
	payload64, keyID, sig64 := rest[:i], rest[i+len(envKeyID):j], rest[j+len(envSig):len(rest)-len(envEnd)]
	const (
		open1 = `{"mediaType":"` + SigstoreMediaType + `","verificationMaterial":{"publicKey":{"hint":"`
		open2 = `"}},"dsseEnvelope":{"payload":"`
		open3 = `","payloadType":"` + PayloadType + `","signatures":[{"sig":"`
		end   = `"}]}}` + "\n"
	)
	b := make([]byte, 0, len(open1)+len(keyID)+len(open2)+len(payload64)+len(open3)+len(sig64)+len(end))
	b = append(b, open1...)
	b = append(b, keyID...)
	b = append(b, open2...)
	b = append(b, payload64...)
	b = append(b, open3...)
	b = append(b, sig64...)
	return append(b, end...), nil
}

// errSigstoreBundle is the error of Verify and Load for a Sigstore bundle.
var errSigstoreBundle = malformed("this is a Sigstore bundle, for `cosign verify-blob-attestation --bundle`; layerseal reads the %s beside it", StatementFile)

// isSigstoreBundle reports whether b looks like a Sigstore bundle of any
// version (a JSON object whose mediaType is one), so that a verifier
// handed one can say what it is.
func isSigstoreBundle(b []byte) bool {
	var v struct {
		MediaType string `json:"mediaType"`
	}
	return json.Unmarshal(b, &v) == nil && strings.HasPrefix(v.MediaType, "application/vnd.dev.sigstore.bundle")
}
