package attest

import (
	"bytes"
	"errors"
	"testing"
)

// TestCanonicalCheck: only the one encoding of a value passes, with its
// newline where one is wanted; a longer, shorter or respelled one is
// malformed.
func TestCanonicalCheck(t *testing.T) {
	v := struct {
		A string   `json:"a"`
		B []uint64 `json:"b"`
	}{"x\u00e9", []uint64{1, 2}}
	const canon = `{"a":"x` + "\u00e9" + `","b":[1,2]}`
	if err := canonicalCheck([]byte(canon), v, false, "test"); err != nil {
		t.Fatalf("canonical: %v", err)
	}
	if err := canonicalCheck([]byte(canon+"\n"), v, true, "test"); err != nil {
		t.Fatalf("canonical with newline: %v", err)
	}
	for _, b := range []string{
		canon + "\n", canon[:len(canon)-1], canon + " ", `{"b":[1,2],"a":"x` + "\u00e9" + `"}`,
		`{"a":"x\u00e9","b":[1,2]}`, `{"a": "x` + "\u00e9" + `","b":[1,2]}`, "",
	} {
		if err := canonicalCheck([]byte(b), v, false, "test"); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: err = %v, want ErrMalformed", b, err)
		}
	}
	if err := canonicalCheck([]byte(canon), v, true, "test"); !errors.Is(err, ErrMalformed) {
		t.Errorf("no newline: err = %v, want ErrMalformed", err)
	}
}

// TestRawValueInPlace: a predicate decoded as a rawValue is the slice of
// the payload it lies in, not a copy.
func TestRawValueInPlace(t *testing.T) {
	payload := []byte(`{"_type":"t","subject":[],"predicateType":"p","predicate":{"a":[1,2]}}`)
	var head intoto[rawValue]
	if err := strictJSON(payload, &head, "statement"); err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(payload, []byte(`{"a"`))
	if string(head.Predicate) != `{"a":[1,2]}` || &head.Predicate[0] != &payload[at] {
		t.Fatalf("predicate %q is not the payload's own bytes", head.Predicate)
	}
}
