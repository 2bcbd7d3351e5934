package attest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
)

// SignLaunch sets l.KeyID to the signer's key ID, checks l, and returns the
// envelope file bytes of the signed launch record (canonical JSON and a
// newline). The statement of the session refers to these exact bytes.
func SignLaunch(s *Signer, l *LaunchRecord) ([]byte, error) {
	if s == nil {
		return nil, errors.New("sign launch: no signer")
	}
	l.KeyID = s.KeyID()
	if err := l.validate(); err != nil {
		return nil, fmt.Errorf("sign launch: %w", err)
	}
	pj := l.toJSON()
	pred, err := canonicalJSON(pj)
	if err != nil {
		return nil, fmt.Errorf("sign launch: encode: %w", err)
	}
	roomy, err := makeInToto(launchSubjectPrefix+l.SessionID, predicateDigest(pred), LaunchPredicateType, pj, 2*len(pred))
	if err != nil {
		return nil, fmt.Errorf("sign launch: %w", err)
	}
	// The payload must read back as it was written; this refuses values
	// without one spelling before they are signed.
	if _, err := parseLaunchPayload(roomy[payloadRoom:]); err != nil {
		return nil, fmt.Errorf("sign launch: %w", err)
	}
	return sealInPlace(s, roomy)
}

// SignStatement sets st.KeyID to the signer's key ID, st.Root and st.Count
// from st.Entries, st.AppliedRoot and st.AppliedCount from
// st.AppliedEntries() and st.Complete from st.Incomplete, checks st, and returns
// the envelope file bytes of the signed statement (canonical JSON and a
// newline). It fails with ErrTooLarge rather than sign a statement no
// verifier reads. It costs what MerkleRoot does, plus encoding.
func SignStatement(s *Signer, st *Statement) ([]byte, error) {
	if s == nil {
		return nil, errors.New("sign statement: no signer")
	}
	root, err := MerkleRoot(st.Entries)
	if err != nil {
		return nil, fmt.Errorf("sign statement: %w", err)
	}
	applied, err := MerkleRoot(st.AppliedEntries())
	if err != nil {
		return nil, fmt.Errorf("sign statement: applied: %w", err)
	}
	st.KeyID = s.KeyID()
	st.Root = root
	st.Count = uint64(len(st.Entries))
	st.AppliedRoot = applied
	st.AppliedCount = uint64(len(st.AppliedEntries()))
	st.Complete = len(st.Incomplete) == 0
	if err := st.validate(); err != nil {
		return nil, fmt.Errorf("sign statement: %w", err)
	}
	// The envelope holds the payload in base64, so a payload of more than
	// three quarters of MaxStatementSize cannot fit: its encoding stops
	// there, before it is parsed back and sealed, each of which would cost
	// as much memory again.
	roomy, err := makeInTotoSubjects(statementSubjects(root, st.Entries), StatementPredicateType, st.toJSON(),
		payloadHint(len(st.Entries)+len(st.Applied), len(st.Incomplete)+len(st.Excluded)+len(st.Violations)), MaxStatementSize/4*3)
	if errors.Is(err, ErrTooLarge) {
		return nil, fmt.Errorf("sign statement: %w: over %d bytes, at most %d are read", ErrTooLarge, MaxStatementSize, MaxStatementSize)
	}
	if err != nil {
		return nil, fmt.Errorf("sign statement: %w", err)
	}
	if _, err := parseStatementPayload(roomy[payloadRoom:]); err != nil {
		return nil, fmt.Errorf("sign statement: %w", err)
	}
	env, err := sealInPlace(s, roomy)
	if err == nil && len(env) > MaxStatementSize {
		return nil, fmt.Errorf("sign statement: %w: %d bytes, at most %d are read", ErrTooLarge, len(env), MaxStatementSize)
	}
	return env, err
}

// payloadHint is a first guess at the size of a payload listing entries
// and reasons: a change is about 200 bytes of JSON with a short path.
func payloadHint(entries, reasons int) int {
	return 4096 + 256*entries + 256*reasons
}

// predicateDigest is the launch subject's digest: the lowercase hex SHA-256
// of the canonical predicate JSON.
func predicateDigest(pred []byte) string {
	sum := sha256.Sum256(pred)
	return hex.EncodeToString(sum[:])
}
