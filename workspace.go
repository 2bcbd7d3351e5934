package layerseal

import (
	"errors"
	"fmt"
	"os"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
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

// ErrAgentCannotWrite is wrapped by AgentMayWrite's error: the agent's user
// may not create entries in the workspace's root directory.
var ErrAgentCannotWrite = errors.New("cannot write the workspace directory")

// AgentMayWrite tells, from the permission bits and owner of the workspace
// directory ws, whether an agent running as u may create entries in it
// (the overlay shows the workspace's own owners and modes). Root is
// assumed to hold CAP_DAC_OVERRIDE; ACLs are not read. It is an early
// warning for the operator, not a check anything depends on.
func AgentMayWrite(ws string, u specs.User) error {
	if u.UID == 0 {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Stat(ws, &st); err != nil {
		return fmt.Errorf("workspace %q: %w", ws, err)
	}
	const w, x = 0o2, 0o1
	bits := st.Mode & 0o7
	switch {
	case st.Uid == u.UID:
		bits = st.Mode >> 6 & 0o7
	case st.Gid == u.GID || slices.Contains(u.AdditionalGids, st.Gid):
		bits = st.Mode >> 3 & 0o7
	}
	if bits&(w|x) == w|x {
		return nil
	}
	return fmt.Errorf("the agent's uid %d (gid %d) %w %q (owner uid %d, gid %d, mode %04o)", u.UID, u.GID, ErrAgentCannotWrite, ws, st.Uid, st.Gid, st.Mode&0o7777)
}
