package attest

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// signedArtifact is one signed envelope and the verifier of its kind.
type signedArtifact struct {
	name   string
	env    []byte
	verify func(env []byte, pub PublicKey) error
}

// signedArtifacts signs one of each kind of artifact with s: launch
// record, statement, two checkpoints, a statement head and a checkpoint
// head.
func signedArtifacts(t *testing.T, s *Signer) []signedArtifact {
	t.Helper()
	launch, cps, _ := sampleChain(t, s, 2, session1)
	st := sampleStatement(launch, session1)
	st.CheckpointHead = sha(cps[1])
	stEnv, err := SignStatement(s, st)
	if err != nil {
		t.Fatal(err)
	}
	head, err := SignHead(s, HeadOf(st))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := VerifyCheckpoint(cps[1], s.Public())
	if err != nil {
		t.Fatal(err)
	}
	cpHead, err := SignHead(s, HeadOfCheckpoint(cp))
	if err != nil {
		t.Fatal(err)
	}
	launchV := func(env []byte, pub PublicKey) error { _, err := VerifyLaunch(env, pub); return err }
	stV := func(env []byte, pub PublicKey) error { _, err := VerifyStatement(env, pub, launch); return err }
	cpV := func(env []byte, pub PublicKey) error { _, err := VerifyCheckpoint(env, pub); return err }
	headV := func(env []byte, pub PublicKey) error { _, err := VerifyHead(env, pub); return err }
	return []signedArtifact{
		{"launch", launch, launchV}, {"statement", stEnv, stV},
		{"checkpoint 1", cps[0], cpV}, {"checkpoint 2", cps[1], cpV},
		{"statement head", head, headV}, {"checkpoint head", cpHead, headV},
	}
}

// resign returns env with its signatures replaced by f's result.
func resign(t *testing.T, env []byte, f func([]signature) []signature) []byte {
	t.Helper()
	e, err := parseEnvelope(env, MaxStatementSize)
	if err != nil {
		t.Fatal(err)
	}
	b, err := envelopeFile(e.Payload, f(append([]signature(nil), e.Signatures...)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAlgorithmBound: an artifact signed under one algorithm verifies only
// under its own key, never under a key of another algorithm (made from the
// same seed, so a hybrid key's components are the other two keys), and
// relabelling its signatures with another key's ids is refused.
func TestAlgorithmBound(t *testing.T) {
	s := testSigner(t, 1)
	for _, a := range signedArtifacts(t, s) {
		if err := a.verify(a.env, s.Public()); err != nil {
			t.Fatalf("%s: the untouched artifact: %v", a.name, err)
		}
		for _, alg := range Algorithms() {
			if alg == testAlg {
				continue
			}
			o := testSignerOf(t, alg, 1)
			if err := a.verify(a.env, o.Public()); !rejected(err) {
				t.Errorf("%s signed with %s verified under a %s key: %v", a.name, testAlg, alg, err)
			}
			// The signatures relabelled with the other key's component ids,
			// as many as fit.
			ids := o.Public().components()
			relabelled := resign(t, a.env, func(sigs []signature) []signature {
				for i := range sigs {
					sigs[i].KeyID = ids[min(i, len(ids)-1)].id
				}
				return sigs
			})
			if bytes.Equal(relabelled, a.env) {
				continue // the same ids: an ed25519 key is a hybrid key's first component
			}
			for _, k := range []PublicKey{s.Public(), o.Public()} {
				if err := a.verify(relabelled, k); !rejected(err) {
					t.Errorf("%s with keyids of %s verified under %s: %v", a.name, alg, k.Alg(), err)
				}
			}
		}
	}
}

// TestHybridForgeries takes every kind of artifact signed by a hybrid key
// and strips, swaps or relabels its two signatures: none verifies, under
// the hybrid key nor under either of its component keys; the ML-DSA-65
// signature under an ed25519 key id is malformed. It signs with a hybrid
// key in every pass of TestMain, whatever testAlg is.
func TestHybridForgeries(t *testing.T) {
	s := testSignerOf(t, AlgHybrid, 1)
	ed, ml := testSignerOf(t, AlgEd25519, 1).Public(), testSignerOf(t, AlgMLDSA65, 1).Public()
	if got := s.Public().components(); !got[0].Equal(ed) || !got[1].Equal(ml) {
		t.Fatal("the hybrid test key's components are not the single test keys of the same seed")
	}
	for _, a := range signedArtifacts(t, s) {
		e, err := parseEnvelope(a.env, MaxStatementSize)
		if err != nil {
			t.Fatal(err)
		}
		if len(e.Signatures) != 2 || e.Signatures[0].KeyID != ed.KeyID() || e.Signatures[1].KeyID != ml.KeyID() {
			t.Fatalf("%s: signatures %q, %q; want the keyids of the ed25519 then the ML-DSA-65 component", a.name, e.Signatures[0].KeyID, e.Signatures[1].KeyID)
		}
		edSig, mlSig := e.Signatures[0], e.Signatures[1]
		for _, c := range []struct {
			name string
			sigs []signature
			want error // ErrNotVerified, or nil for ErrMalformed
		}{
			{"ML-DSA-65 signature stripped", []signature{edSig}, ErrNotVerified},
			{"ed25519 signature stripped", []signature{mlSig}, ErrNotVerified},
			{"both stripped", nil, nil},
			{"swapped", []signature{mlSig, edSig}, nil},
			{"keyids swapped", []signature{{KeyID: ml.KeyID(), Sig: edSig.Sig}, {KeyID: ed.KeyID(), Sig: mlSig.Sig}}, nil},
			{"signatures swapped", []signature{{KeyID: ed.KeyID(), Sig: mlSig.Sig}, {KeyID: ml.KeyID(), Sig: edSig.Sig}}, nil},
			{"ML-DSA signature under the ed25519 key id", []signature{{KeyID: ed.KeyID(), Sig: mlSig.Sig}}, nil},
			{"ed25519 signature under the ML-DSA key id", []signature{{KeyID: ml.KeyID(), Sig: edSig.Sig}}, nil},
			{"ed25519 signature twice", []signature{edSig, edSig}, nil},
			{"ML-DSA-65 signature twice", []signature{mlSig, mlSig}, nil},
			{"a third signature", []signature{edSig, mlSig, mlSig}, nil},
			{"one signature under the hybrid key id", []signature{{KeyID: s.KeyID(), Sig: edSig.Sig}}, nil},
			{"ed25519 signature of another key", []signature{testSignerOf(t, AlgEd25519, 2).signOne(t, a.env), mlSig}, ErrNotVerified},
			{"ML-DSA-65 signature of another key", []signature{edSig, testSignerOf(t, AlgMLDSA65, 2).signOne(t, a.env)}, ErrNotVerified},
		} {
			forged := resign(t, a.env, func([]signature) []signature { return c.sigs })
			for _, k := range []PublicKey{s.Public(), ed, ml} {
				err := a.verify(forged, k)
				switch {
				case !rejected(err):
					t.Errorf("%s, %s: verified under the %s key (%v)", a.name, c.name, k.Alg(), err)
				case c.want == nil && !errors.Is(err, ErrMalformed):
					t.Errorf("%s, %s: %v, want ErrMalformed", a.name, c.name, err)
				case c.want != nil && k.Alg() == AlgHybrid && err != c.want:
					t.Errorf("%s, %s: %v, want %v", a.name, c.name, err, c.want)
				}
			}
		}
	}
}

// signOne returns s's one signature of env's payload, s a single key.
func (s *Signer) signOne(t *testing.T, env []byte) signature {
	t.Helper()
	e, err := parseEnvelope(env, MaxStatementSize)
	if err != nil {
		t.Fatal(err)
	}
	sigs, err := s.sign(pae(e.PayloadType, e.Payload))
	if err != nil || len(sigs) != 1 {
		t.Fatalf("sign: %v", err)
	}
	return sigs[0]
}

// The envelope of each algorithm, byte for byte as the doc comment of
// envelope says.
func TestEnvelopeForm(t *testing.T) {
	s := testSigner(t, 1)
	_, stEnv := signedPair(t, s)
	e, err := parseEnvelope(stEnv, MaxStatementSize)
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	want.WriteString(`{"payloadType":"application/vnd.in-toto+json","payload":"` + b64(e.Payload) + `","signatures":[`)
	for i, p := range s.Public().components() {
		if i > 0 {
			want.WriteString(",")
		}
		want.WriteString(`{"keyid":"` + p.KeyID() + `","sig":"` + b64(e.Signatures[i].Sig) + `"}`)
		if len(e.Signatures[i].Sig) != sigSize(p.Alg()) {
			t.Errorf("%s signature of %d bytes", p.Alg(), len(e.Signatures[i].Sig))
		}
	}
	want.WriteString("]}\n")
	if string(stEnv) != want.String() {
		t.Errorf("envelope is not in the documented form")
	}
	if id, err := SignerKeyID(stEnv); err != nil || id != s.KeyID() {
		t.Errorf("SignerKeyID = %q, %v; want %q", id, err, s.KeyID())
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// TestPayloadLimit: an in-toto payload longer than its limit stops with
// ErrTooLarge, and the buffer it was encoded into never grew past the
// limit; one within the limit is encoded whole.
func TestPayloadLimit(t *testing.T) {
	pred := map[string]string{"text": strings.Repeat("x", 100_000)}
	if _, err := makeInTotoSubjects(nil, "p", pred, 512, 50_000); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("100 KB payload, 50 KB limit: err = %v, want ErrTooLarge", err)
	}
	roomy, err := makeInTotoSubjects(nil, "p", pred, 512, 200_000)
	if err != nil || !bytes.Contains(roomy, []byte(pred["text"])) {
		t.Fatalf("100 KB payload, 200 KB limit: %d bytes, err = %v", len(roomy), err)
	}
	// So does a statement's, its entries encoded one at a time.
	st := &Statement{}
	for i := range 1000 {
		st.Entries = append(st.Entries, Entry{Path: Path(fmt.Sprintf("f%04d", i)), Change: Added, New: &State{Type: File}})
	}
	if _, err := makeInTotoSubjects(nil, "p", st.toJSON(), 512, 50_000); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("statement of 1000 entries, 50 KB limit: err = %v, want ErrTooLarge", err)
	}
	w := &appendWriter{b: make([]byte, 0, 8), limit: 100}
	for range 10 {
		if _, err := w.Write(make([]byte, 9)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Write(make([]byte, 11)); !errors.Is(err, ErrTooLarge) || len(w.b) != 90 || cap(w.b) > 100 {
		t.Fatalf("len %d, cap %d, err %v; want 90 bytes in at most 100 and ErrTooLarge", len(w.b), cap(w.b), err)
	}
}

// TestEnvelopeInPlace: an envelope written over its payload, in the
// payload's own buffer, is byte for byte the one written apart, for
// payloads ending in each partial group and around the chunk size; a
// buffer without the room is left to envelopeFile.
func TestEnvelopeInPlace(t *testing.T) {
	s := testSigner(t, 1)
	for _, n := range []int{0, 1, 2, 3, 4, 5, 100, 3071, 3072, 3073, 3074, 6144, 6145, 6146, 10_000, 100_001} {
		payload := make([]byte, n)
		for i := range payload {
			payload[i] = byte(i*7 + i>>8)
		}
		sigs, err := s.sign(pae(PayloadType, payload))
		if err != nil {
			t.Fatal(err)
		}
		want, err := envelopeFile(payload, sigs)
		if err != nil {
			t.Fatal(err)
		}
		roomy := make([]byte, payloadRoom, payloadRoom+base64.StdEncoding.EncodedLen(n)+envelopeRoom)
		roomy = append(roomy, payload...)
		got, ok, err := envelopeInPlace(roomy, sigs)
		if err != nil || !ok || !bytes.Equal(got, want) || &got[0] != &roomy[envInPlaceAt] {
			t.Fatalf("payload of %d bytes: in place %t, %v; envelope differs: %t", n, ok, err, !bytes.Equal(got, want))
		}
		if _, ok, _ := envelopeInPlace(append([]byte(nil), roomy[:payloadRoom+n]...), sigs); ok {
			t.Fatalf("payload of %d bytes: written in place without the room", n)
		}
	}
}
