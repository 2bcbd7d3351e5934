package attest

import (
	"errors"
	"fmt"
	"io/fs"
)

// ErrKeyLinked is wrapped by LoadPrivateKey's error for a key file with
// more than one name (hard links). Masking a key hides the name it was
// loaded by, not its other names, and another may lie where an agent can
// read it.
var ErrKeyLinked = errors.New("private key file has more than one name")

// checkKeyLinks refuses the private key file at path, opened as fi (the
// stat of the descriptor read, never of the path again), when it has more
// than one name.
func checkKeyLinks(path string, fi fs.FileInfo) error {
	n, ok := linkCount(fi)
	if !ok {
		return fmt.Errorf("read key %q: cannot count its names", path)
	}
	if n > 1 {
		return fmt.Errorf("read key %q: %w: it has %d names (hard links), and another may lie where the agent can read it; remove the other links (`find / -xdev -samefile %q` lists them), or give this key a file of its own (cp %q %q && mv %q %q)",
			path, ErrKeyLinked, n, path, path, path+".new", path+".new", path)
	}
	return nil
}
