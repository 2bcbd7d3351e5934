package attest

import "fmt"

// ReadStatement parses a statement envelope exactly as strictly as
// VerifyStatement, Merkle root included, but without checking its
// signature: for showing a statement to someone with no key at hand. Its
// result is not evidence; VerifyStatement is.
func ReadStatement(env []byte) (*Statement, error) {
	e, err := parseEnvelope(env, MaxStatementSize)
	if err != nil {
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
