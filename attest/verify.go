package attest

import (
	"bytes"
	"crypto/sha256"
	"fmt"
)

// launchSubjectPrefix begins the name of a launch record's subject; the
// session ID follows.
const launchSubjectPrefix = "launch:"

// VerifyLaunch verifies a launch record's envelope file with pub and returns
// the record. It refuses input over MaxLaunchSize, and otherwise checks what
// VerifyStatement does of a statement, with the subject's digest being the
// SHA-256 of the canonical predicate.
func VerifyLaunch(env []byte, pub PublicKey) (*LaunchRecord, error) {
	payload, err := open(env, MaxLaunchSize, pub)
	if err != nil {
		return nil, err
	}
	l, err := parseLaunchPayload(payload)
	if err != nil {
		return nil, err
	}
	if l.KeyID != KeyID(pub) {
		return nil, ErrNotVerified
	}
	return l, nil
}

// parseLaunchPayload strictly parses and validates a launch record payload
// and checks its subject.
func parseLaunchPayload(payload []byte) (*LaunchRecord, error) {
	it, err := parseInToto[launchJSON](payload, LaunchPredicateType)
	if err != nil {
		return nil, err
	}
	l, err := it.Predicate.fromJSON()
	if err != nil {
		return nil, malformed("launch record: %v", err)
	}
	if err := l.validate(); err != nil {
		return nil, malformed("launch record: %v", err)
	}
	if name := it.Subject[0].Name; name != launchSubjectPrefix+l.SessionID {
		return nil, malformed("launch record: subject name %q, want %q", name, launchSubjectPrefix+l.SessionID)
	}
	pred, err := canonicalJSON(&it.Predicate)
	if err != nil {
		return nil, malformed("launch record: %v", err)
	}
	if it.Subject[0].Digest.SHA256 != predicateDigest(pred) {
		return nil, ErrNotVerified
	}
	return l, nil
}

// VerifyStatement verifies a statement's envelope file with pub and returns
// the statement. With launchEnv (a launch record's envelope file) not nil it
// also verifies that record with pub and checks that the statement is bound
// to it: same session, key and workspace, and Launch equal to the SHA-256
// of launchEnv's bytes.
//
// It checks, in order: the size (at most MaxStatementSize); the envelope's
// strict JSON, its one valid encoding, payload type and single signature;
// the signature, which must be pub's with key ID KeyID(pub); the payload's
// strict JSON (no unknown members, no case variants, no duplicate names, no
// invalid UTF-8, no trailing data), in-toto type and predicate type; that
// the payload is the one valid encoding of what it decoded to; every value;
// the key ID; that the subjects after the first are exactly the file
// subjects the entries make (StatementSubjects); that the entries
// recompute to the signed Merkle root in the first subject and the
// predicate; and the launch binding.
//
// A failed cryptographic or binding check returns ErrNotVerified; anything
// else that is refused returns an error wrapping ErrMalformed. A verified
// statement may still be incomplete (Complete false). Verification costs
// linear time and memory in the size of env, with MerkleRoot's hashing.
func VerifyStatement(env []byte, pub PublicKey, launchEnv []byte) (*Statement, error) {
	payload, err := open(env, MaxStatementSize, pub)
	if err != nil {
		return nil, err
	}
	st, err := parseStatementPayload(payload)
	if err != nil {
		return nil, err
	}
	if st.KeyID != KeyID(pub) {
		return nil, ErrNotVerified
	}
	if err := st.checkRoot(); err != nil {
		return nil, err
	}
	if launchEnv != nil {
		l, err := VerifyLaunch(launchEnv, pub)
		if err != nil {
			if err == ErrNotVerified {
				return nil, err
			}
			return nil, fmt.Errorf("launch record: %w", err)
		}
		sum := sha256.Sum256(launchEnv)
		if !bytes.Equal(sum[:], st.Launch) || l.SessionID != st.SessionID ||
			l.KeyID != st.KeyID || l.Workspace != st.Workspace {
			return nil, ErrNotVerified
		}
	}
	return st, nil
}

// parseStatementPayload strictly parses and validates a statement payload
// and checks its subjects: the first names the predicate's root, the rest
// are exactly the file subjects its entries make (see StatementSubjects).
func parseStatementPayload(payload []byte) (*Statement, error) {
	it, err := parseInTotoSubjects[statementJSON](payload, StatementPredicateType)
	if err != nil {
		return nil, err
	}
	st, err := it.Predicate.fromJSON()
	if err != nil {
		return nil, malformed("statement: %v", err)
	}
	if err := st.validate(); err != nil {
		return nil, malformed("statement: %v", err)
	}
	if err := checkFileSubjects(it.Subject, st.Entries); err != nil {
		return nil, err
	}
	if err := checkSubject(it.Subject[0], "statement", st.Root); err != nil {
		return nil, err
	}
	return st, nil
}
