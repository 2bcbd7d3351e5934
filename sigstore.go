package layerseal

import (
	"errors"
	"fmt"
	"os"

	"github.com/layerseal/layerseal/attest"
)

// SigstoreFile is the file name of the statement's Sigstore bundle in the
// output dir (see attest.SigstoreBundle).
const SigstoreFile = attest.SigstoreFile

// ErrSigstoreNotWritten is wrapped by an error that says a statement was
// written but its Sigstore bundle was not: nothing is lost, the statement
// itself is what the bundle repackages.
var ErrSigstoreNotWritten = errors.New("the statement is written, but not its Sigstore bundle " + SigstoreFile +
	" (`cosign verify-blob-attestation --signature` checks " + StatementFile + " without it)")

// writeSigstore writes the Sigstore bundle of the signed statement env to
// path with write, for a key Sigstore can check, and nothing otherwise.
// It is written after the statement, so a failure here loses nothing:
// the caller reports it and goes on.
func writeSigstore(key *attest.Signer, env []byte, path string, write func(string, []byte, os.FileMode) error) error {
	b, err := attest.SigstoreBundle(env, key.Public())
	if errors.Is(err, attest.ErrNoSigstore) {
		return nil
	}
	if err == nil {
		err = write(path, b, 0o644)
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrSigstoreNotWritten, err)
	}
	return nil
}
