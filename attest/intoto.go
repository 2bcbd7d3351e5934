package attest

import (
	"crypto/sha256"
	"encoding/base64"
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
// encoding of what it parsed to, with exactly one subject.
func parseInToto[P any](payload []byte, ptype string) (*intoto[P], error) {
	st, err := parseInTotoSubjects[P](payload, ptype)
	if err != nil {
		return nil, err
	}
	if len(st.Subject) != 1 {
		return nil, malformed("statement has %d subjects, want 1", len(st.Subject))
	}
	return st, nil
}

// parseInTotoSubjects is parseInToto for a statement of one to MaxSubjects
// subjects, each with a digest of 64 lowercase hex digits.
func parseInTotoSubjects[P any](payload []byte, ptype string) (*intoto[P], error) {
	var head intoto[rawValue]
	if err := strictJSON(payload, &head, "statement"); err != nil {
		return nil, err
	}
	if head.Type != StatementType {
		return nil, malformed("unsupported format %q", head.Type)
	}
	if head.PredicateType != ptype {
		return nil, malformed("unsupported format %q", head.PredicateType)
	}
	if n := len(head.Subject); n < 1 || n > MaxSubjects {
		return nil, malformed("statement has %d subjects, want 1 to %d", n, MaxSubjects)
	}
	for i, s := range head.Subject {
		if err := checkHex("subject digest", s.Digest.SHA256); err != nil {
			return nil, malformed("subject %d: %v", i, err)
		}
	}
	st := &intoto[P]{Type: head.Type, Subject: head.Subject, PredicateType: head.PredicateType}
	if err := strictJSON([]byte(head.Predicate), &st.Predicate, "predicate"); err != nil {
		return nil, err
	}
	if err := canonicalCheck(payload, st, false, "statement"); err != nil {
		return nil, err
	}
	return st, nil
}

// rawValue is one JSON value as it lies in the input it was decoded from:
// decoded from a []byte (with strictJSON), it is a slice of that input
// rather than a copy, so a statement's predicate is not held twice while
// it is parsed.
type rawValue []byte

func (v *rawValue) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	b, err := dec.ReadValue()
	*v = rawValue(b)
	return err
}

// makeInToto returns the canonical payload of an in-toto statement with
// one subject behind payloadRoom bytes of room (for sealInPlace), encoded
// into a buffer of hint bytes to begin with (it grows if the payload is
// larger).
func makeInToto[P any](name, digest, ptype string, pred P, hint int) (roomy []byte, err error) {
	return makeInTotoSubjects([]subject{{Name: name, Digest: digestSet{SHA256: digest}}}, ptype, pred, hint, 0)
}

// makeInTotoSubjects is makeInToto for a list of subjects. When limit is
// not 0, a payload longer than limit bytes is not encoded further: the
// error wraps ErrTooLarge, and the buffer never grew past the limit.
func makeInTotoSubjects[P any](subjects []subject, ptype string, pred P, hint, limit int) (roomy []byte, err error) {
	st := intoto[P]{
		Type:          StatementType,
		Subject:       subjects,
		PredicateType: ptype,
		Predicate:     pred,
	}
	// Room for the payload's envelope too, which sealInPlace writes over
	// it: the part of the buffer past the payload is never written until
	// then (and so, fresh from the system, not resident).
	size := max(hint, 512)
	if limit > 0 {
		size = min(size, limit)
		limit += payloadRoom
	}
	size = payloadRoom + base64.StdEncoding.EncodedLen(size) + envelopeRoom
	w := &appendWriter{b: make([]byte, payloadRoom, size), limit: limit}
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

// MaxSubjects bounds the subjects of a statement: the change-set subject
// and at most MaxSubjects-1 file subjects (see StatementSubjects).
// Sigstore's Go verifier, which cosign uses for bundles, refuses a
// statement of more than 1,024 subjects outright, so a longer list would
// make the statement useless to it for every file rather than for the
// files past the cap. The cap also bounds what the subjects add to a
// statement: 99 bytes of payload a file subject plus its path, a third
// more in the envelope (163,680 bytes for 1,023 files of 21-byte paths).
const MaxSubjects = 1024

// StatementSubjects returns the in-toto subjects of a statement with Merkle
// root root and entries entries, in order, as SignStatement writes them and
// VerifyStatement requires them to be:
//
//   - first the change-set subject, named StatementSubject, with root as
//     its digest;
//   - then one subject for each entry, in path order, whose new state is a
//     regular file with a digest and whose change is added, modified or
//     typechange (its content is the agent's): named by its path, with the
//     SHA-256 of its content as its digest.
//
// A subject's name is the path itself, so a path whose text form is not
// the path (one that holds invalid UTF-8, control characters such as a
// newline, '%', or the invisible code points listed at Path.MarshalText) has
// no subject: an in-toto name cannot carry its bytes, or a reader could
// take the escaped spelling for the name. Such a file is still a signed
// entry of the statement, and `layerseal prove` proves it; only a
// Sigstore verifier cannot find it. So is a file past the cap: the
// subjects stop after MaxSubjects-1 files. A file over the digest cap has
// no digest and no subject. Deleted files, metadata-only changes, and
// files of other types have none either.
//
// The returned names and digests are text; each digest is 64 lowercase hex
// digits.
func StatementSubjects(root []byte, entries []Entry) []Subject {
	subs := statementSubjects(root, entries)
	out := make([]Subject, len(subs))
	for i, s := range subs {
		out[i] = Subject{Name: s.Name, SHA256: s.Digest.SHA256}
	}
	return out
}

// Subject is one in-toto subject of a statement: a name and the
// lowercase hex SHA-256 digest of what it names.
type Subject struct {
	Name   string
	SHA256 string
}

func statementSubjects(root []byte, entries []Entry) []subject {
	subs := []subject{{Name: StatementSubject, Digest: digestSet{SHA256: hex.EncodeToString(root)}}}
	for i := range entries {
		if len(subs) == MaxSubjects {
			break
		}
		if name, digest, ok := fileSubject(&entries[i]); ok {
			subs = append(subs, subject{Name: name, Digest: digestSet{SHA256: digest}})
		}
	}
	return subs
}

// fileSubject returns the subject of e, if it has one (see
// StatementSubjects).
func fileSubject(e *Entry) (name, digest string, ok bool) {
	switch e.Change {
	case Added, Modified, TypeChange:
	default:
		return "", "", false
	}
	if e.New == nil || e.New.Type != File || len(e.New.SHA256) != sha256.Size {
		return "", "", false
	}
	if encodeText(string(e.Path)) != string(e.Path) {
		return "", "", false
	}
	return string(e.Path), hex.EncodeToString(e.New.SHA256), true
}

// checkFileSubjects requires subjects after the first to be exactly those
// StatementSubjects makes of entries: one missing, one more, another
// name, digest or order is malformed. (The first is checkSubject's.)
func checkFileSubjects(subjects []subject, entries []Entry) error {
	want := statementSubjects(nil, entries)[1:]
	got := subjects[1:]
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return malformed("statement: subject %d is %q with digest %s, but the entries make it %q with digest %s",
				i+1, got[i].Name, got[i].Digest.SHA256, want[i].Name, want[i].Digest.SHA256)
		}
	}
	if len(got) != len(want) {
		return malformed("statement: %d file subjects, but the entries make %d", len(got), len(want))
	}
	return nil
}
