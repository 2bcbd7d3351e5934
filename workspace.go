package layerseal

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
	"github.com/layerseal/layerseal/overlay"
)

// ErrWorkspaceMoved means the workspace path no longer leads to the
// directory the session started on (or to nothing), or the statement
// says the lower root changed or went missing: nothing is applied, since
// what was examined is not where the path now leads.
var ErrWorkspaceMoved = errors.New("the workspace is not the directory the session started on")

// openWorkspace opens the workspace directory at path (no symlink
// followed in its last component) and checks that it is the directory
// the launch record identifies (device, inode and, where known, mount
// ID). Everything after works beneath the descriptor, never through the
// path again.
func openWorkspace(path string, want attest.LowerIdentity) (*os.File, error) {
	fd, err := linux.Openat(unix.AT_FDCWD, path, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	if err != nil {
		return nil, fmt.Errorf("workspace %q: %w: %w", path, ErrWorkspaceMoved, unwrapPath(err))
	}
	st, err := linux.Lstat(fd, "")
	if err == nil && !sameLower(st, want) {
		err = fmt.Errorf("workspace %q: %w (it is device %d inode %d now, %d and %d at launch)", path, ErrWorkspaceMoved, st.Dev, st.Ino, want.Dev, want.Ino)
	}
	if err != nil {
		linux.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// sameLower reports whether st is the lower root the launch record names.
func sameLower(st linux.Stat, want attest.LowerIdentity) bool {
	if st.Dev != want.Dev || st.Ino != want.Ino {
		return false
	}
	return !want.MountIDKnown || !st.HasMountID || st.MountID == want.MountID
}

// lowerMoved reports whether the statement says the lower root changed or
// went missing; such a change set is never applied.
func lowerMoved(rs []attest.Reason) bool {
	for _, r := range rs {
		if r.Code == attest.LowerChanged || r.Code == attest.RootMissing {
			return true
		}
	}
	return false
}

// CheckWorkspace compares the workspace directory dir with what the
// statement says was applied to it (its AppliedEntries), path by path
// (see overlay.Check); it returns the paths where they disagree. The
// contents of excluded subtrees are not itemized, so not compared.
func CheckWorkspace(dir string, st *attest.Statement) ([]overlay.Mismatch, error) {
	fd, err := linux.Openat(unix.AT_FDCWD, dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return nil, fmt.Errorf("workspace %q: %w", dir, unwrapPath(err))
	}
	defer linux.Close(fd)
	return overlay.Check(fd, st.AppliedEntries())
}
