package attest

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// FuzzVerifyStatement signs arbitrary payloads with a test key, so inputs
// reach the payload parser, and checks that every answer is verified or
// one of the two error classes, and that an accepted payload is exactly
// what SignStatement makes of the statement it decoded to.
func FuzzVerifyStatement(f *testing.F) {
	s := testSigner(f, 1)
	_, stEnv := signedPair(f, s)
	f.Add(payloadOf(f, stEnv))
	f.Fuzz(func(t *testing.T, payload []byte) {
		env := reseal(t, s, payload)
		st, err := VerifyStatement(env, s.Public(), nil)
		if err != nil {
			if err != ErrNotVerified && !errors.Is(err, ErrMalformed) {
				t.Fatalf("error of neither class: %v", err)
			}
			return
		}
		again := *st
		env2, err := SignStatement(s, &again)
		if err != nil {
			t.Fatalf("verified statement does not sign again: %v", err)
		}
		if !bytes.Equal(env2, env) {
			t.Fatalf("accepted payload is not the one encoding:\n%s\nre-signed:\n%s", payload, payloadOf(t, env2))
		}
		if !reflect.DeepEqual(&again, st) {
			t.Fatalf("signing changed the verified statement")
		}
	})
}

// FuzzLeaf checks that ParseLeaf inverts MarshalLeaf for any leaf it accepts.
func FuzzLeaf(f *testing.F) {
	for _, e := range sampleEntries() {
		f.Add(e.MarshalLeaf())
	}
	f.Fuzz(func(t *testing.T, leaf []byte) {
		e, err := ParseLeaf(leaf)
		if err != nil {
			return
		}
		for _, st := range []*State{e.Old, e.New} {
			if st != nil && st.SHA256 != nil && len(st.SHA256) != 32 {
				t.Fatalf("parsed digest of %d bytes", len(st.SHA256))
			}
		}
		if got := e.MarshalLeaf(); !bytes.Equal(got, leaf) {
			t.Fatalf("MarshalLeaf(ParseLeaf(%x)) = %x", leaf, got)
		}
	})
}
