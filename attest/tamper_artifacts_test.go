package attest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
)

// rejected reports whether err is one of the two refusal classes.
func rejected(err error) bool { return err == ErrNotVerified || errors.Is(err, ErrMalformed) }

// TestTamperEveryByte flips each bit of every byte of a statement and a
// launch-record envelope file in turn, and truncates them at every length:
// none of these may verify, and every refusal is one of the two classes.
func TestTamperEveryByte(t *testing.T) {
	s := testSigner(t, 1)
	launchEnv, stEnv := signedPair(t, s)
	tried := 0
	for _, art := range []struct {
		name   string
		b      []byte
		verify func([]byte) error
	}{
		{"statement", stEnv, func(b []byte) error { _, err := VerifyStatement(b, s.Public(), launchEnv); return err }},
		{"launch", launchEnv, func(b []byte) error { _, err := VerifyLaunch(b, s.Public()); return err }},
		{"launch paired", launchEnv, func(b []byte) error { _, err := VerifyStatement(stEnv, s.Public(), b); return err }},
	} {
		if err := art.verify(art.b); err != nil {
			t.Fatalf("%s: the untouched artifact: %v", art.name, err)
		}
		for _, i := range tamperPositions(art.b) {
			for _, bit := range []byte{0x01, 0x20, 0x80} {
				m := bytes.Clone(art.b)
				m[i] ^= bit
				tried++
				if err := art.verify(m); !rejected(err) {
					t.Fatalf("%s: byte %d ^ %#x: got %v, want a refusal", art.name, i, bit, err)
				}
			}
		}
		for n := 0; n < len(art.b); n++ {
			tried++
			if err := art.verify(art.b[:n]); !errors.Is(err, ErrMalformed) {
				t.Fatalf("%s truncated to %d bytes: got %v, want ErrMalformed", art.name, n, err)
			}
		}
	}
	t.Logf("%d byte-level mutations tried, all rejected", tried)
}

// mutateChanges re-signs the statement after f rearranges its changes.
func mutateChanges(t *testing.T, s *Signer, stEnv []byte, f func([]entryJSON) []entryJSON) []byte {
	t.Helper()
	return resealEdited(t, s, stEnv, func(it *intoto[statementJSON]) {
		c := &it.Predicate.Changes
		js := c.parsed
		for i := range c.entries {
			js = append(js, entryToJSON(&c.entries[i]))
		}
		*c = entryList{parsed: f(js)}
	})
}

// resealEdited re-signs env's payload after f edits it, read as an
// in-toto statement of predicate P.
func resealEdited[P any](t *testing.T, s *Signer, env []byte, f func(*intoto[P])) []byte {
	t.Helper()
	var it intoto[P]
	if err := json.Unmarshal(payloadOf(t, env), &it); err != nil {
		t.Fatal(err)
	}
	f(&it)
	p, err := canonicalJSON(&it)
	if err != nil {
		t.Fatal(err)
	}
	return reseal(t, s, p)
}

// TestTamperLeaves reorders, duplicates, drops and adds leaves of a
// statement, re-signed with its own key (the signer is vouching for a list
// that no longer matches the Merkle root or is invalid): each is refused.
func TestTamperLeaves(t *testing.T) {
	s := testSigner(t, 1)
	launchEnv, stEnv := signedPair(t, s)
	n := len(sampleEntries())
	extra := entryJSON{Path: "\xffadded", Change: Added, New: stateToJSON(&State{Type: FIFO, Mode: 0o600})}
	tried := 0
	check := func(name string, env []byte, want error) {
		t.Helper()
		tried++
		_, err := VerifyStatement(env, s.Public(), launchEnv)
		if !errors.Is(err, want) {
			t.Errorf("%s: got %v, want %v", name, err, want)
		}
	}
	for i := 0; i+1 < n; i++ {
		check("swap", mutateChanges(t, s, stEnv, func(c []entryJSON) []entryJSON {
			c[i], c[i+1] = c[i+1], c[i]
			return c
		}), ErrMalformed)
		check("duplicate", mutateChanges(t, s, stEnv, func(c []entryJSON) []entryJSON {
			return append(c[:i+1], c[i:]...)
		}), ErrMalformed)
	}
	for i := 0; i < n; i++ {
		// The count no longer matches: malformed.
		check("drop", mutateChanges(t, s, stEnv, func(c []entryJSON) []entryJSON {
			return append(c[:i:i], c[i+1:]...)
		}), ErrMalformed)
		// Replace a leaf by another in its place: same count, valid
		// order, wrong root; a file that had a subject no longer
		// backs it, which is malformed.
		want := ErrNotVerified
		if _, _, ok := fileSubject(&sampleEntries()[i]); ok {
			want = ErrMalformed
		}
		check("replace", mutateChanges(t, s, stEnv, func(c []entryJSON) []entryJSON {
			e := c[i]
			e.Change, e.Old, e.New = Added, nil, stateToJSON(&State{Type: FIFO, Mode: 0o600})
			if c[i].Change == Added && c[i].New.Type == FIFO {
				e.New.Mode = 0o644
			}
			c[i] = e
			return c
		}), want)
	}
	check("add", mutateChanges(t, s, stEnv, func(c []entryJSON) []entryJSON { return append(c, extra) }), ErrMalformed)
	check("drop all", mutateChanges(t, s, stEnv, func([]entryJSON) []entryJSON { return nil }), ErrMalformed)
	// Add and drop, so the count still matches: the root does not.
	check("add and drop", mutateChanges(t, s, stEnv, func(c []entryJSON) []entryJSON { return append(c[1:], extra) }), ErrNotVerified)
	t.Logf("%d leaf mutations tried, all rejected", tried)
}

// TestTamperKeyTypes gives verification keys of other types: PEM public
// keys of ECDSA and RSA are refused by the loader, and no key or a key of
// another algorithm by the verifier.
func TestTamperKeyTypes(t *testing.T) {
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, pub := range map[string]any{"ecdsa": &ec.PublicKey, "rsa": &rs.PublicKey} {
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParsePublicKey(der); err == nil {
			t.Errorf("%s: ParsePublicKey accepted it", name)
		}
		p := filepath.Join(dir, name+".pub")
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadPublicKey(p); err == nil {
			t.Errorf("%s: LoadPublicKey accepted it", name)
		}
	}
	s := testSigner(t, 1)
	launchEnv, stEnv := signedPair(t, s)
	keys := []PublicKey{{}}
	for _, alg := range Algorithms() {
		if alg != testAlg {
			keys = append(keys, testSignerOf(t, alg, 1).Public())
		}
	}
	for _, k := range keys {
		if _, err := VerifyStatement(stEnv, k, launchEnv); err == nil {
			t.Errorf("a key of %q verified the statement", k.Alg())
		}
		if _, err := VerifyLaunch(launchEnv, k); err == nil {
			t.Errorf("a key of %q verified the launch record", k.Alg())
		}
	}
}

// TestTamperReplay pairs artifacts across sessions and keys: a statement
// re-signed for another session, a launch record signed by another key
// but with the right key ID claimed, and envelopes swapped between kinds.
func TestTamperReplay(t *testing.T) {
	s, other := testSigner(t, 1), testSigner(t, 2)
	launchEnv, stEnv := signedPair(t, s)
	launch2, err := SignLaunch(s, sampleLaunch(session2))
	if err != nil {
		t.Fatal(err)
	}
	// The same statement body claimed for session2 but still bound to
	// session1's launch digest.
	st := sampleStatement(launchEnv, session2)
	replayed, err := SignStatement(s, st)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ st, launch []byte }{
		"session2 statement, session1 launch":        {replayed, launchEnv},
		"session2 statement, session2 launch":        {replayed, launch2},
		"session1 statement, session2 launch":        {stEnv, launch2},
		"launch record where the statement goes":     {launchEnv, launchEnv},
		"statement where the launch record goes":     {stEnv, stEnv},
		"session1 statement, other key's launch":     {stEnv, mustSignLaunch(t, other, sampleLaunch(session1))},
		"other key's statement, session1 launch":     {mustSignStatement(t, other, sampleStatement(launchEnv, session1)), launchEnv},
		"session1 statement, launch with claimed ID": {stEnv, claimKeyID(t, other, s, launchEnv)},
	} {
		if _, err := VerifyStatement(c.st, s.Public(), c.launch); !rejected(err) {
			t.Errorf("%s: got %v, want a refusal", name, err)
		}
	}
}

func mustSignLaunch(t *testing.T, s *Signer, l *LaunchRecord) []byte {
	t.Helper()
	b, err := SignLaunch(s, l)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustSignStatement(t *testing.T, s *Signer, st *Statement) []byte {
	t.Helper()
	b, err := SignStatement(s, st)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// claimKeyID signs env's payload with signer but writes claimed's key ID
// into the envelope.
func claimKeyID(t *testing.T, signer, claimed *Signer, env []byte) []byte {
	t.Helper()
	forged := reseal(t, signer, payloadOf(t, env))
	return bytes.Replace(forged, []byte(signer.KeyID()), []byte(claimed.KeyID()), 1)
}

// TestEntryWithoutModelForm: an entry of a statement whose JSON has no
// model form (a digest in capitals) is malformed, and the error names the
// entry and its field, wherever it lies in the list.
func TestEntryWithoutModelForm(t *testing.T) {
	s := testSigner(t, 1)
	launchEnv, stEnv := signedPair(t, s)
	for i, e := range sampleEntries() {
		if e.New == nil || e.New.SHA256 == nil {
			continue
		}
		env := mutateChanges(t, s, stEnv, func(c []entryJSON) []entryJSON {
			c[i].New.SHA256 = strings.ToUpper(c[i].New.SHA256)
			return c
		})
		_, err := VerifyStatement(env, s.Public(), launchEnv)
		want := fmt.Sprintf("entry %q: sha256 %q is not 64 lowercase hex digits", string(e.Path), strings.ToUpper(hex.EncodeToString(e.New.SHA256)))
		if !errors.Is(err, ErrMalformed) || !strings.Contains(fmt.Sprint(err), want) {
			t.Errorf("entry %d: got %v, want ErrMalformed saying %s", i, err, want)
		}
	}
}
