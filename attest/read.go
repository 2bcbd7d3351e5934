package attest

import (
	"fmt"

	"github.com/go-json-experiment/json"
)

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

// ReadLaunch parses a launch record envelope exactly as strictly as
// VerifyLaunch, without checking its signature: for showing it. Its result
// is not evidence; VerifyLaunch is.
func ReadLaunch(env []byte) (*LaunchRecord, error) {
	e, err := parseEnvelope(env, MaxLaunchSize)
	if err != nil {
		return nil, err
	}
	return parseLaunchPayload(e.Payload)
}

// SignerKeyID returns the key ID an envelope says it was signed with (its
// payload's key_id, or else its signature's keyid), without checking
// anything else of it: for saying which key a file that does not verify
// was signed with. Its result is not evidence.
func SignerKeyID(env []byte) (string, error) {
	e, err := parseEnvelope(env, MaxStatementSize)
	if err != nil {
		return "", err
	}
	var p struct {
		Predicate struct {
			KeyID string `json:"key_id"`
		} `json:"predicate"`
	}
	if json.Unmarshal(e.Payload, &p) == nil && checkKeyID(p.Predicate.KeyID) == nil {
		return p.Predicate.KeyID, nil
	}
	return e.Signatures[0].KeyID, nil
}

// PredicateType returns the predicate type an envelope's payload names
// (such as HeadPredicateType), without checking anything else of it, or ""
// when it names none: for choosing the parser whose error says what is
// wrong with a file of that kind. Its result is not evidence.
func PredicateType(env []byte) string {
	e, err := parseEnvelope(env, MaxStatementSize)
	if err != nil {
		return ""
	}
	var p struct {
		PredicateType string `json:"predicateType"`
	}
	if json.Unmarshal(e.Payload, &p, json.RejectUnknownMembers(false)) != nil {
		return ""
	}
	return p.PredicateType
}
