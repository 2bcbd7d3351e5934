//go:build !windows && !plan9

package attest

import (
	"io/fs"
	"syscall"
)

// linkCount is fi's number of names, where the system reports it.
func linkCount(fi fs.FileInfo) (uint64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return uint64(st.Nlink), true
}
