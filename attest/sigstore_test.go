package attest

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

// TestSigstoreBundle: the bundle is the envelope's payload and signature
// under the fixed spelling, with the key ID as the key's hint and none on
// the signature; an envelope that another key signed, or that is not one,
// gets no bundle.
func TestSigstoreBundle(t *testing.T) {
	s := testSignerOf(t, AlgEd25519, 1) // the one kind Sigstore checks
	_, stEnv := signedPair(t, s)
	b, err := SigstoreBundle(stEnv, s.Public())
	if err != nil {
		t.Fatal(err)
	}
	env, err := parseEnvelope(stEnv, MaxStatementSize)
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.StdEncoding
	want := `{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json","verificationMaterial":{"publicKey":{"hint":"` + s.KeyID() +
		`"}},"dsseEnvelope":{"payload":"` + enc.EncodeToString(env.Payload) +
		`","payloadType":"application/vnd.in-toto+json","signatures":[{"sig":"` + enc.EncodeToString(env.Signatures[0].Sig) + `"}]}}` + "\n"
	if string(b) != want {
		t.Errorf("bundle:\n got %s\nwant %s", b, want)
	}

	if _, err := SigstoreBundle(stEnv, testSignerOf(t, AlgEd25519, 2).Public()); err != ErrNotVerified {
		t.Errorf("another key: %v", err)
	}
	if _, err := SigstoreBundle(bytes.Replace(stEnv, []byte(`"keyid"`), []byte(`"keyId"`), 1), s.Public()); !errors.Is(err, ErrMalformed) {
		t.Errorf("not an envelope: %v", err)
	}
	if _, err := SigstoreBundle(bytes.TrimSuffix(stEnv, []byte("\n")), s.Public()); !errors.Is(err, ErrMalformed) {
		t.Errorf("not the one spelling of an envelope: %v", err)
	}
}

// TestVerifySigstoreBundle: handed a Sigstore bundle, Verify and Load say
// what it is and which file to give them instead.
func TestVerifySigstoreBundle(t *testing.T) {
	s := testSignerOf(t, AlgEd25519, 1)
	_, stEnv := signedPair(t, s)
	b, err := SigstoreBundle(stEnv, s.Public())
	if err != nil {
		t.Fatal(err)
	}
	_, err = Verify("statement.sigstore.json", b, s.Public(), VerifyOptions{})
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "Sigstore bundle") || !strings.Contains(err.Error(), StatementFile) {
		t.Errorf("verify of a bundle: %v", err)
	}
	for _, pub := range []PublicKey{s.Public(), {}} {
		_, err = Load("statement.sigstore.json", b, pub)
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "Sigstore bundle") {
			t.Errorf("load of a bundle: %v", err)
		}
	}
}

// TestSigstoreOnlyEd25519: a statement signed with a key Sigstore cannot
// check gets no bundle.
func TestSigstoreOnlyEd25519(t *testing.T) {
	for _, alg := range []string{AlgMLDSA65, AlgHybrid} {
		s := testSignerOf(t, alg, 1)
		_, stEnv := signedPair(t, s)
		if b, err := SigstoreBundle(stEnv, s.Public()); !errors.Is(err, ErrNoSigstore) || b != nil {
			t.Errorf("%s: got %d bytes, %v; want ErrNoSigstore", alg, len(b), err)
		}
	}
}
