package attest

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzHead signs arbitrary head payloads with a test key, so inputs reach
// the head parser: every answer is a head or one of the two error classes,
// and an accepted payload is exactly what SignHead makes of the head it
// decoded to.
func FuzzHead(f *testing.F) {
	s := testSigner(f, 1)
	_, head := signedHead(f, s)
	f.Add(payloadOf(f, head))
	f.Fuzz(func(t *testing.T, payload []byte) {
		env := reseal(t, s, payload)
		h, err := VerifyHead(env, s.Public())
		if err != nil {
			if err != ErrNotVerified && !errors.Is(err, ErrMalformed) {
				t.Fatalf("error of neither class: %v", err)
			}
			return
		}
		again := *h
		env2, err := SignHead(s, &again)
		if err != nil {
			t.Fatalf("verified head does not sign again: %v", err)
		}
		if !bytes.Equal(env2, env) {
			t.Fatalf("accepted payload is not the one encoding:\n%s\nre-signed:\n%s", payload, payloadOf(t, env2))
		}
	})
}

// FuzzBundle verifies arbitrary bundle files against a statement's signed
// head: every answer is one of the two error classes, or a proof that is
// true of the statement and whose bundle is the one encoding of what it
// parsed to.
func FuzzBundle(f *testing.F) {
	s := testSigner(f, 1)
	st, head := proofSetup(f, s, session1, []Reason{{Code: DigestCap, Path: "src", Detail: "x"}}, sampleEntries(), nil)
	for _, p := range []Path{"bin", "b", "zzz", "src/main.go"} {
		f.Add(prove(f, st, head, p, false))
		f.Add(proveSubtree(f, st, head, p, false))
	}
	f.Fuzz(func(t *testing.T, file []byte) {
		got, err := VerifyBundle(file, s.Public())
		if err != nil && !errors.Is(err, ErrIncomplete) {
			if !rejected(err) {
				t.Fatalf("error of neither class: %v", err)
			}
			return
		}
		truth(t, st, got)
		if errors.Is(err, ErrIncomplete) == got.Holds() {
			t.Fatalf("ErrIncomplete is %v but Holds is %t", err, got.Holds())
		}
		b, perr := ParseBundle(file)
		if perr != nil {
			t.Fatal(perr)
		}
		again, merr := b.Marshal()
		if merr != nil || !bytes.Equal(again, file) {
			t.Fatalf("accepted bundle is not the one encoding: %v", merr)
		}
	})
}
