package overlay

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
)

// linkAll makes every hard-link group one inode: each member becomes a
// link to the group's anchor, which is either an entry written by
// createAll or an unchanged workspace file.
func (a *applier) linkAll() error {
	for _, g := range a.groups {
		if err := a.linkGroup(g); err != nil {
			return err
		}
	}
	return nil
}

func (a *applier) linkGroup(g applyGroup) error {
	if a.left[g.anchor] {
		for _, m := range g.members {
			if _, listed := a.index[m]; listed {
				a.leave(m, "its hard-link anchor was left")
			}
		}
		return nil
	}
	ldir, lbase, err := a.openParent(g.anchor)
	if err != nil {
		return &ApplyError{Path: g.anchor, Op: "open parent", Err: err}
	}
	defer unix.Close(ldir)
	lst, err := a.anchorStat(ldir, lbase, g.anchor)
	if err != nil {
		return err
	}
	// An unchanged anchor keeps the workspace links overlayfs split off
	// its copy-up: its other names are not listed, so they are not
	// changed (the sweep made sure none of them is protected).
	ai, anchorListed := a.index[g.anchor]
	var anchorSum []byte // the anchor's workspace digest, once computed
	for _, m := range g.members {
		if a.left[m] {
			continue
		}
		mdir, mbase, err := a.openParent(m)
		if err != nil {
			return &ApplyError{Path: m, Op: "open parent", Err: err}
		}
		err = func() error {
			defer unix.Close(mdir)
			mst, err := linux.Lstat(mdir, mbase)
			if err == nil && mst.Dev == lst.Dev && mst.Ino == lst.Ino {
				return nil // linked by an earlier run
			}
			if err != nil && !errors.Is(err, unix.ENOENT) {
				return &ApplyError{Path: m, Op: "stat", Err: err}
			}
			if i, listed := a.index[m]; listed {
				want := a.entries[i].New
				if want.Size != lst.Size {
					return &ApplyError{Path: m, Op: "verify", Err: fmt.Errorf("%w: hard-link anchor %q has %d bytes, statement says %d", ErrNotAttested, string(g.anchor), lst.Size, want.Size)}
				}
				attested := anchorListed && a.written[g.anchor] && bytes.Equal(a.entries[ai].New.SHA256, want.SHA256)
				if want.SHA256 != nil && !attested {
					if anchorSum == nil {
						if anchorSum, err = a.hashWorkspace(g.anchor, lst); err != nil {
							return err
						}
					}
					if !bytes.Equal(anchorSum, want.SHA256) {
						return &ApplyError{Path: m, Op: "verify", Err: fmt.Errorf("%w: hard-link anchor %q has sha256 %x, statement says %x", ErrNotAttested, string(g.anchor), anchorSum, want.SHA256)}
					}
				}
			}
			tmp := a.tempName(-1, m)
			if err := a.clearTemp(mdir, tmp, m); err != nil {
				return err
			}
			if err := a.step("link", m); err != nil {
				return err
			}
			if err := linux.Linkat(ldir, lbase, mdir, tmp); err != nil {
				return &ApplyError{Path: m, Op: "link", Err: err}
			}
			return a.rename(mdir, tmp, mbase, m)
		}()
		if err != nil {
			return err
		}
	}
	return nil
}

// anchorStat stats a hard-link anchor in the workspace; it must be a
// regular file.
func (a *applier) anchorStat(dirfd int, base string, p attest.Path) (linux.Stat, error) {
	st, err := linux.Lstat(dirfd, base)
	if err != nil {
		return st, &ApplyError{Path: p, Op: "stat", Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return st, &ApplyError{Path: p, Op: "verify", Err: fmt.Errorf("%w: hard-link anchor has mode %#o in the workspace", ErrNotAttested, st.Mode)}
	}
	return st, nil
}

// openWorkspaceFile opens the regular file p of the workspace for reading
// and checks it is still the inode st describes.
func (a *applier) openWorkspaceFile(p attest.Path, st linux.Stat) (int, error) {
	fd, err := linux.OpenBeneath(a.root, string(p), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return -1, &ApplyError{Path: p, Op: "open", Err: err}
	}
	now, err := linux.Lstat(fd, "")
	if err == nil && (now.Dev != st.Dev || now.Ino != st.Ino) {
		err = errors.New("file replaced while being opened")
	}
	if err != nil {
		unix.Close(fd)
		return -1, &ApplyError{Path: p, Op: "open", Err: err}
	}
	return fd, nil
}

// hashWorkspace returns the SHA-256 of the workspace file p (inode st).
func (a *applier) hashWorkspace(p attest.Path, st linux.Stat) ([]byte, error) {
	fd, err := a.openWorkspaceFile(p, st)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	h := sha256.New()
	if err := applyCopy(-1, fd, int64(st.Size), h); err != nil {
		return nil, &ApplyError{Path: p, Op: "read", Err: err}
	}
	return h.Sum(nil), nil
}
