package layerseal

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
	"github.com/layerseal/layerseal/internal/posixacl"
)

// grantViolations finds the listed entries whose new state lets someone
// write who could write neither the entry before the run nor its
// directory in the workspace (see policy.NewWriters): each is a
// RuleGrantsWrite violation (package policy), unless an allow covers it. The
// directory is the entry's nearest ancestor that is a directory in the
// lower layer (the workspace root for a top-level entry), read beneath
// the reader's lower root without following symlinks, each one once (so
// at most one read per directory of a listed path, whose number the
// statement's entry budget bounds).
func grantViolations(r *reader, entries []attest.Entry) ([]attest.Violation, error) {
	var lower *lowerDirs
	defer func() {
		if lower != nil {
			lower.close()
		}
	}()
	var out []attest.Violation
	for _, e := range entries {
		if e.New == nil || e.New.Type == attest.Symlink || r.rules.Allowed(e.Path) {
			continue
		}
		var dir *attest.State
		if e.Path != attest.Root {
			if lower == nil {
				var err error
				if lower, err = openLowerDirs(r); err != nil {
					return nil, err
				}
			}
			var err error
			if dir, err = lower.nearest(e.Path); err != nil {
				return nil, err
			}
		}
		if rule := r.rules.GrantViolation(e.Path, e.Old, e.New, dir); rule != "" {
			out = append(out, attest.Violation{Path: e.Path, Rule: rule})
		}
	}
	return out, nil
}

// lowerDirs reads the states of the lower layer's directories, beneath
// its root, each once.
type lowerDirs struct {
	root int
	dirs map[attest.Path]*attest.State // nil: no directory there
}

func openLowerDirs(r *reader) (*lowerDirs, error) {
	var fd int
	var err error
	if r.lowerDir != nil {
		fd, err = linux.OpenBeneath(int(r.lowerDir.Fd()), ".", unix.O_PATH|unix.O_DIRECTORY)
	} else {
		fd, err = linux.Openat(unix.AT_FDCWD, r.lower, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	}
	if err != nil {
		return nil, fmt.Errorf("open the workspace to read who could write it: %w", err)
	}
	return &lowerDirs{root: fd, dirs: map[attest.Path]*attest.State{}}, nil
}

func (l *lowerDirs) close() { unix.Close(l.root) }

// nearest returns the state of p's nearest ancestor that is a directory
// in the lower layer (the root at worst).
func (l *lowerDirs) nearest(p attest.Path) (*attest.State, error) {
	for {
		i := strings.LastIndexByte(string(p), '/')
		if i < 0 {
			p = attest.Root
		} else {
			p = p[:i]
		}
		s, err := l.state(p)
		if s != nil || err != nil {
			return s, err
		}
	}
}

// state returns the lower directory at p, nil when there is none: absent,
// not a directory, reached through a symlink or on another mount.
func (l *lowerDirs) state(p attest.Path) (*attest.State, error) {
	if s, ok := l.dirs[p]; ok {
		return s, nil
	}
	fd, err := linux.OpenBeneath(l.root, string(p), unix.O_PATH|unix.O_DIRECTORY)
	switch {
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV):
		if p == attest.Root {
			return nil, fmt.Errorf("open the workspace root: %w", err)
		}
		l.dirs[p] = nil
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read who could write %q in the workspace: %w", p, err)
	}
	defer unix.Close(fd)
	st, err := linux.Lstat(fd, "")
	if err != nil {
		return nil, fmt.Errorf("read who could write %q in the workspace: %w", p, err)
	}
	s := &attest.State{Type: attest.Dir, Mode: st.Mode & 0o7777, UID: st.UID, GID: st.GID}
	for _, x := range []string{posixacl.AccessXattr, posixacl.DefaultXattr} {
		v, err := linux.Getxattr(fd, x)
		switch {
		case errors.Is(err, unix.ENODATA) || errors.Is(err, unix.ENOTSUP):
		case err != nil:
			return nil, fmt.Errorf("read who could write %q in the workspace: %w", p, err)
		default:
			s.Xattrs = append(s.Xattrs, attest.Xattr{Name: x, Value: v})
		}
	}
	l.dirs[p] = s
	return s, nil
}
