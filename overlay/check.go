package overlay

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
)

// Mismatch is one path where a workspace disagrees with the state an
// entry says was applied there.
type Mismatch struct {
	Path attest.Path
	What string // e.g. "mode 0600, statement says 0644"
}

// Check compares the workspace at root (a directory descriptor; nothing
// beneath it is followed through a symlink or across a mount) with what
// applying entries makes of it, path by path: a deleted path must be
// absent; any other must have the new state's type, mode, owner and mtime,
// a file its size and (where the entry has one) SHA-256, a symlink its
// target, a device its number, exactly its extended attributes (but
// trusted.overlay.*, which the merged view never shows), and a file with
// a Link the inode of that path. It reads each listed file once and
// returns the mismatches in path order (none when they agree).
func Check(root int, entries []attest.Entry) ([]Mismatch, error) {
	var out []Mismatch
	for _, e := range entries {
		if err := e.Path.Valid(); err != nil {
			return nil, err
		}
		what, err := checkEntry(root, &e)
		if err != nil {
			return nil, fmt.Errorf("check %q: %w", string(e.Path), err)
		}
		if what != "" {
			out = append(out, Mismatch{Path: e.Path, What: what})
		}
	}
	slices.SortFunc(out, func(a, b Mismatch) int { return strings.Compare(string(a.Path), string(b.Path)) })
	return out, nil
}

// openWorkspacePath opens p beneath root (O_PATH), the root itself for ".".
func openWorkspacePath(root int, p attest.Path) (int, error) {
	if p == attest.Root {
		return linux.OpenBeneath(root, ".", unix.O_PATH)
	}
	return linux.OpenBeneath(root, string(p), unix.O_PATH)
}

func checkEntry(root int, e *attest.Entry) (string, error) {
	fd, err := openWorkspacePath(root, e.Path)
	switch {
	case (errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP)) && e.New == nil:
		return "", nil // ELOOP: a symlink now stands where a directory on the way was
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
		return "absent, statement says a " + string(e.New.Type), nil
	case err != nil:
		return fmt.Sprintf("cannot be opened beneath the workspace (%v)", errors.Unwrap(err)), nil
	}
	defer unix.Close(fd)
	st, err := linux.Lstat(fd, "")
	if err != nil {
		return "", err
	}
	if e.New == nil {
		return fmt.Sprintf("present (a %s), statement says deleted", fileType(st.Mode)), nil
	}
	want := e.New
	var diffs []string
	add := func(format string, a ...any) { diffs = append(diffs, fmt.Sprintf(format, a...)) }
	if got := fileType(st.Mode); got != want.Type {
		return fmt.Sprintf("a %s, statement says a %s", got, want.Type), nil
	}
	if want.Type != attest.Symlink && st.Mode&07777 != want.Mode {
		add("mode %#o, statement says %#o", st.Mode&07777, want.Mode)
	}
	if st.UID != want.UID || st.GID != want.GID {
		add("owner %d:%d, statement says %d:%d", st.UID, st.GID, want.UID, want.GID)
	}
	if st.MtimeNS != want.MtimeNS || st.MtimeOutOfRange {
		add("mtime %d, statement says %d", st.MtimeNS, want.MtimeNS)
	}
	switch want.Type {
	case attest.File:
		if st.Size != want.Size {
			add("size %d, statement says %d", st.Size, want.Size)
		} else if want.SHA256 != nil {
			sum, err := workspaceDigest(root, e.Path, st)
			if err != nil {
				return "", err
			}
			if !bytes.Equal(sum, want.SHA256) {
				add("sha256 %x, statement says %x", sum, want.SHA256)
			}
		}
	case attest.Symlink:
		t, err := linux.Readlinkat(fd, "")
		if err != nil {
			return "", err
		}
		if attest.Path(t) != want.Target {
			add("target %s, statement says %s", attest.Path(t), want.Target)
		}
	case attest.CharDev, attest.BlockDev:
		if st.Rdev != want.Rdev {
			add("device %d, statement says %d", st.Rdev, want.Rdev)
		}
	}
	names, err := linux.Listxattr(fd)
	if err != nil {
		return "", err
	}
	var have []attest.Xattr
	for _, n := range names {
		if strings.HasPrefix(n, "trusted.overlay.") {
			continue
		}
		v, err := linux.Getxattr(fd, n)
		if err != nil {
			return "", err
		}
		have = append(have, attest.Xattr{Name: n, Value: v})
	}
	slices.SortFunc(have, func(a, b attest.Xattr) int { return strings.Compare(a.Name, b.Name) })
	if !slices.EqualFunc(have, want.Xattrs, func(a, b attest.Xattr) bool { return a.Name == b.Name && bytes.Equal(a.Value, b.Value) }) {
		add("extended attributes %s, statement says %s", xattrNames(have), xattrNames(want.Xattrs))
	}
	if want.Link != "" && want.Link != e.Path {
		lfd, err := openWorkspacePath(root, want.Link)
		if err == nil {
			lst, err2 := linux.Lstat(lfd, "")
			unix.Close(lfd)
			if err2 == nil && (lst.Dev != st.Dev || lst.Ino != st.Ino) {
				err = errors.New("another inode")
			}
			if err == nil {
				err = err2
			}
		}
		if err != nil {
			add("not a hard link of %s (%v)", want.Link, err)
		}
	}
	return strings.Join(diffs, "; "), nil
}

func xattrNames(xs []attest.Xattr) string {
	names := make([]string, len(xs))
	for i, x := range xs {
		names[i] = attest.Bytes(x.Name).String()
	}
	return "[" + strings.Join(names, " ") + "]"
}

// workspaceDigest hashes the regular file p beneath root, which must be
// the inode st describes.
func workspaceDigest(root int, p attest.Path, st linux.Stat) ([]byte, error) {
	fd, err := linux.OpenBeneath(root, string(p), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	now, err := linux.Lstat(fd, "")
	if err != nil {
		return nil, err
	}
	if now.Dev != st.Dev || now.Ino != st.Ino {
		return nil, errors.New("file replaced while being checked")
	}
	h := sha256.New()
	if err := applyCopy(-1, fd, int64(st.Size), h); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}
