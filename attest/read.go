package attest

import (
	"fmt"
)

// ReadStatement parses a statement envelope exactly as strictly as
// VerifyStatement, including the Merkle root, but without checking its
// signature: for showing a statement to a person who has no key at hand.
// Its result is not evidence; use VerifyStatement for that.
func ReadStatement(env []byte) (*Statement, error) {
	if len(env) > MaxStatementSize {
		return nil, malformed("envelope of %d bytes is over the limit of %d", len(env), MaxStatementSize)
	}
	var e envelope
	if err := strictJSON(env, &e, "envelope"); err != nil {
		return nil, err
	}
	if e.PayloadType != PayloadType {
		return nil, malformed("unsupported payload type %q", e.PayloadType)
	}
	if err := canonicalCheck(env, &e, true, "envelope"); err != nil {
		return nil, err
	}
	st, err := parseStatementPayload(e.Payload)
	if err != nil {
		return nil, fmt.Errorf("statement: %w", err)
	}
	if err := st.checkRoot(); err != nil {
		return nil, err
	}
	return st, nil
}
