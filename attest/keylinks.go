package attest

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
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
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("read key %q: cannot count its names (no stat_t)", path)
	}
	if n := uint64(st.Nlink); n > 1 {
		return fmt.Errorf("read key %q: %w: it has %d names (hard links), and another name may lie where the agent can read it; copy the key to a new file (cp %q %q && mv %q %q) and remove the other links (find / -xdev -samefile %q)",
			path, ErrKeyLinked, n, path, path+".new", path+".new", path, path)
	}
	return nil
}
