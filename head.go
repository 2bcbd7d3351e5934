package layerseal

import (
	"errors"
	"fmt"
	"os"

	"github.com/layerseal/layerseal/attest"
)

// ErrHeadNotWritten is wrapped by an error that says a statement was
// written but its signed head was not: nothing else is lost, but proofs of
// single paths need the head.
var ErrHeadNotWritten = errors.New("the statement is written, but not its signed head, which proofs of single paths need")

// writeHead signs h with key and writes it to path with write. A head is
// written after the artifact it heads, so a failure here loses nothing:
// the caller reports it and goes on.
func writeHead(key *attest.Signer, h *attest.Head, path string, write func(string, []byte, os.FileMode) error) error {
	b, err := attest.SignHead(key, h)
	if err != nil {
		return fmt.Errorf("sign the head: %w", err)
	}
	if err := write(path, b, 0o644); err != nil {
		return fmt.Errorf("write the head: %w", err)
	}
	return nil
}
