package attest

import (
	"encoding/hex"
	"fmt"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// StatementType is the in-toto Statement version this package writes and
// reads.
const StatementType = "https://in-toto.io/Statement/v1"

// The predicate types are the format tags of layerseal's artifacts. A
// verifier refuses any other type or version.
const (
	LaunchPredicateType    = "https://layerseal.dev/launch/v1"
	StatementPredicateType = "https://layerseal.dev/statement/v1"
)

// intoto is an in-toto Statement v1 with predicate P.
type intoto[P any] struct {
	Type          string    `json:"_type"`
	Subject       []subject `json:"subject"`
	PredicateType string    `json:"predicateType"`
	Predicate     P         `json:"predicate"`
}

type subject struct {
	Name   string    `json:"name"`
	Digest digestSet `json:"digest"`
}

type digestSet struct {
	SHA256 string `json:"sha256"`
}

// parseInToto strictly parses payload as an in-toto Statement v1 with
// predicate type ptype into a P, and requires payload to be the canonical
// encoding of what it parsed to.
func parseInToto[P any](payload []byte, ptype string) (*intoto[P], error) {
	var head intoto[jsontext.Value]
	if err := strictJSON(payload, &head, "statement"); err != nil {
		return nil, err
	}
	if head.Type != StatementType {
		return nil, malformed("unsupported format %q", head.Type)
	}
	if head.PredicateType != ptype {
		return nil, malformed("unsupported format %q", head.PredicateType)
	}
	st := &intoto[P]{Type: head.Type, Subject: head.Subject, PredicateType: head.PredicateType}
	if err := strictJSON(head.Predicate, &st.Predicate, "predicate"); err != nil {
		return nil, err
	}
	if err := canonicalCheck(payload, st, false, "statement"); err != nil {
		return nil, err
	}
	if len(st.Subject) != 1 {
		return nil, malformed("statement has %d subjects, want 1", len(st.Subject))
	}
	if err := checkHex("subject digest", st.Subject[0].Digest.SHA256); err != nil {
		return nil, malformed("%v", err)
	}
	return st, nil
}

// makeInToto returns the canonical payload of an in-toto statement behind
// payloadRoom bytes of room (for sealInPlace), encoded into a buffer of
// hint bytes to begin with (it grows if the payload is larger).
func makeInToto[P any](name, digest, ptype string, pred P, hint int) (roomy []byte, err error) {
	st := intoto[P]{
		Type:          StatementType,
		Subject:       []subject{{Name: name, Digest: digestSet{SHA256: digest}}},
		PredicateType: ptype,
		Predicate:     pred,
	}
	w := &appendWriter{b: make([]byte, payloadRoom, payloadRoom+max(hint, 512))}
	if err := json.MarshalWrite(w, &st, encodeOptions); err != nil {
		return nil, fmt.Errorf("encode statement: %w", err)
	}
	return w.b, nil
}

// checkSubject requires the one subject of a statement, a checkpoint or a
// head to be named StatementSubject with their Merkle root as its digest:
// another name is malformed, another digest not verified.
func checkSubject(s subject, what string, root []byte) error {
	if s.Name != StatementSubject {
		return malformed("%s: subject name %q, want %q", what, s.Name, StatementSubject)
	}
	if s.Digest.SHA256 != hex.EncodeToString(root) {
		return ErrNotVerified
	}
	return nil
}
