package attest

import (
	"errors"
	"fmt"
)

// ErrNotVerified is the one error of every failed cryptographic check: a bad
// or missing signature, a key other than the one given, a Merkle root the
// entries do not recompute to, or a statement not bound to the launch record
// it was paired with. It does not say which check failed.
var ErrNotVerified = errors.New("not verified")

// ErrMalformed is wrapped by errors for input that cannot be parsed, is in a
// format this package does not read, or holds invalid values. The wrapping
// message names what is malformed.
var ErrMalformed = errors.New("malformed")

// ErrTooLarge is wrapped by SignStatement's error when the signed
// statement would be larger than MaxStatementSize, which no verifier
// reads: the signer must list less (and say so in a reason) instead.
var ErrTooLarge = errors.New("statement larger than a verifier reads")

// malformed returns an error wrapping ErrMalformed.
func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}
