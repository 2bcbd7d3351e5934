package overlay

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
)

// RevertOptions tunes Revert. The zero value reverts in a privileged
// overlay's upper layer.
type RevertOptions struct {
	// XattrNS is the namespace of overlay's private xattrs: "trusted"
	// (default) or "user".
	XattrNS string
	// LowerDir, if set, is the lower layer's root as the caller opened
	// and identified it; the lower path then only names it.
	LowerDir *os.File
}

// Revert changes the upper layer of an overlay that is not mounted so
// that its merged view shows at p, and everywhere beneath p, exactly what
// the lower layer holds there: p's change is undone before it can reach
// the workspace. Only the upper layer is written; the lower layer is
// read. Upper directories Revert writes into keep their mtime.
//
//   - Where the lower layer shows through (no opaque or replaced
//     ancestor), the upper entry at p is removed — a whiteout (deletion),
//     an added or copied-up file, a whole upper subtree — except that an
//     upper directory over a lower directory only gets the lower
//     directory's metadata back and loses its opaque mark, so the lower
//     children show again while the upper children's own changes stay.
//   - Where it does not (p lies in a replaced directory, or beneath a
//     whiteout or a type change), removing upper entries cannot bring the
//     lower file back: Revert copies it (and its subtree) up, with its
//     owner, mode, extended attributes and mtime, and turns each missing
//     or whited-out ancestor into an opaque directory with the lower
//     directory's metadata that holds only the path to p. Hard links in
//     the lower layer are copied as separate files.
//   - p absent in the lower layer: the upper entry at p is removed.
//
// Revert never follows a symlink or crosses a mount in either layer.
// Running it again on the same path changes nothing more.
func Revert(upper, lower string, p attest.Path, opt RevertOptions) error {
	ns := opt.XattrNS
	if ns == "" {
		ns = DefaultXattrNS
	}
	if ns != "trusted" && ns != "user" {
		return fmt.Errorf("overlay xattr namespace %q: want \"trusted\" or \"user\"", ns)
	}
	if err := p.Valid(); err != nil {
		return err
	}
	rv := &reverter{private: ns + ".overlay."}
	u, err := linux.Openat(unix.AT_FDCWD, upper, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	if err != nil {
		return fmt.Errorf("revert %q: open upper layer: %w", string(p), err)
	}
	defer unix.Close(u)
	var l int
	if opt.LowerDir != nil {
		l, err = linux.OpenBeneath(int(opt.LowerDir.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY)
	} else {
		l, err = linux.Openat(unix.AT_FDCWD, lower, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	}
	if err != nil {
		return fmt.Errorf("revert %q: open lower layer: %w", string(p), err)
	}
	defer unix.Close(l)
	if err := rv.revert(u, l, p); err != nil {
		return fmt.Errorf("revert %q: %w", string(p), err)
	}
	return nil
}

type reverter struct {
	private string // "trusted.overlay." or "user.overlay."
}

func isDirStat(st linux.Stat) bool { return st.Mode&unix.S_IFMT == unix.S_IFDIR }

func (rv *reverter) revert(u, l int, p attest.Path) error {
	if p == attest.Root {
		lst, err := linux.Lstat(l, "")
		if err != nil {
			return err
		}
		return rv.dirMeta(u, l, lst)
	}
	comps := strings.Split(string(p), "/")
	udir, err := unix.Dup(u)
	if err != nil {
		return err
	}
	ldir, err := unix.Dup(l)
	if err != nil {
		unix.Close(udir)
		return err
	}
	defer func() {
		unix.Close(udir)
		if ldir >= 0 {
			unix.Close(ldir)
		}
	}()
	merged := true // the lower directory at udir's path shows through
	for _, c := range comps[:len(comps)-1] {
		lst, lok, err := rv.lowerStat(ldir, c)
		if err != nil {
			return err
		}
		ust, uerr := linux.Lstat(udir, c)
		if uerr != nil && !errors.Is(uerr, unix.ENOENT) {
			return uerr
		}
		uexists := uerr == nil
		if !lok || !isDirStat(lst) {
			// No lower directory here: nothing of p is in the lower
			// layer, so p must be absent from the merged view.
			if !uexists || !isDirStat(ust) {
				return nil
			}
			next, err := linux.OpenBeneath(udir, c, unix.O_RDONLY|unix.O_DIRECTORY)
			if err != nil {
				return err
			}
			unix.Close(udir)
			udir = next
			if ldir >= 0 {
				unix.Close(ldir)
				ldir = -1
			}
			merged = false
			continue
		}
		switch {
		case !uexists && merged:
			return nil // the whole subtree shows the lower layer
		case !uexists:
			if err := rv.preserving(udir, func() error { return rv.holder(udir, ldir, c, lst) }); err != nil {
				return err
			}
		case isDirStat(ust):
			op, err := rv.opaque(udir, c)
			if err != nil {
				return err
			}
			if op {
				merged = false
			}
		default: // a whiteout or a type change hides the lower directory
			err := rv.preserving(udir, func() error {
				if err := linux.Unlinkat(udir, c, 0); err != nil {
					return err
				}
				return rv.holder(udir, ldir, c, lst)
			})
			if err != nil {
				return err
			}
			merged = false
		}
		nu, err := linux.OpenBeneath(udir, c, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return err
		}
		unix.Close(udir)
		udir = nu
		nl, err := linux.OpenBeneath(ldir, c, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return err
		}
		unix.Close(ldir)
		ldir = nl
	}
	name := comps[len(comps)-1]
	return rv.preserving(udir, func() error { return rv.last(udir, ldir, name, merged) })
}

// last reverts the final component name in udir (ldir the lower parent,
// -1 when there is none).
func (rv *reverter) last(udir, ldir int, name string, merged bool) error {
	lst, lok, err := rv.lowerStat(ldir, name)
	if err != nil {
		return err
	}
	ust, uerr := linux.Lstat(udir, name)
	if uerr != nil && !errors.Is(uerr, unix.ENOENT) {
		return uerr
	}
	uexists := uerr == nil
	if !lok {
		if uexists {
			return rv.removeUpper(udir, name, ust)
		}
		return nil
	}
	if merged {
		if !uexists {
			return nil
		}
		if isDirStat(ust) && isDirStat(lst) {
			return rv.dirAsLower(udir, ldir, name, lst, false)
		}
		return rv.removeUpper(udir, name, ust)
	}
	if uexists {
		if err := rv.removeUpper(udir, name, ust); err != nil {
			return err
		}
	}
	return rv.copyUp(udir, ldir, name, lst)
}

// lowerStat stats name in the lower directory ldir: ok false when ldir is
// -1 or name is absent there (or is a whiteout, which shows nothing).
func (rv *reverter) lowerStat(ldir int, name string) (linux.Stat, bool, error) {
	if ldir < 0 {
		return linux.Stat{}, false, nil
	}
	st, err := linux.Lstat(ldir, name)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return st, false, nil
	}
	if err != nil {
		return st, false, err
	}
	if isWhiteout(st) {
		return st, false, nil
	}
	return st, true, nil
}

// opaque reports whether the upper directory name in udir is opaque.
func (rv *reverter) opaque(udir int, name string) (bool, error) {
	fd, err := linux.OpenBeneath(udir, name, unix.O_PATH)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	v, err := linux.Getxattr(fd, rv.private+"opaque")
	if errors.Is(err, unix.ENODATA) {
		return false, nil
	}
	return string(v) == "y", err
}

// preserving runs fn, which changes entries of the upper directory dir,
// and then gives dir back its mtime.
func (rv *reverter) preserving(dir int, fn func() error) error {
	st, err := linux.Lstat(dir, "")
	if err != nil {
		return err
	}
	if err := fn(); err != nil {
		return err
	}
	return linux.Utimensat(dir, "", linux.UtimeOmit, st.MtimeNS)
}

// holder makes name in udir an opaque directory with the metadata of the
// lower directory name in ldir (stat lst): it will hold only the path to
// the reverted entry.
func (rv *reverter) holder(udir, ldir int, name string, lst linux.Stat) error {
	if err := linux.Mkdirat(udir, name, 0o700); err != nil {
		return err
	}
	return rv.dirAsLower(udir, ldir, name, lst, true)
}

// dirMeta gives the upper directory open at fd the owner, mode, user
// xattrs and mtime of the lower entry open at lfd (stat lst).
func (rv *reverter) dirMeta(fd, lfd int, lst linux.Stat) error {
	want, err := rv.userXattrs(lfd)
	if err != nil {
		return err
	}
	have, err := linux.Listxattr(fd)
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, x := range want {
		keep[x.Name] = true
	}
	for _, n := range have {
		if !keep[n] && !rv.privateName(n) {
			if err := linux.Removexattr(fd, n); err != nil && !errors.Is(err, unix.ENODATA) {
				return err
			}
		}
	}
	return rv.setMeta(fd, lst, want)
}

// setMeta sets owner, mode, xattrs and mtime of the new upper file at fd.
func (rv *reverter) setMeta(fd int, lst linux.Stat, xs []attest.Xattr) error {
	if err := linux.Fchownat(fd, "", lst.UID, lst.GID); err != nil {
		return err
	}
	if lst.Mode&unix.S_IFMT != unix.S_IFLNK {
		if err := linux.Fchmodat(fd, "", lst.Mode&0o7777); err != nil {
			return err
		}
	}
	for _, x := range xs {
		if cur, err := linux.Getxattr(fd, x.Name); err == nil && bytes.Equal(cur, x.Value) {
			continue
		}
		if err := linux.Setxattr(fd, x.Name, x.Value); err != nil {
			return err
		}
	}
	return linux.Utimensat(fd, "", linux.UtimeOmit, lst.MtimeNS)
}

// privateName reports whether an upper xattr is overlay bookkeeping (not
// the escaped form of a user's ns.overlay.X).
func (rv *reverter) privateName(n string) bool {
	rest, ok := strings.CutPrefix(n, rv.private)
	return ok && !strings.HasPrefix(rest, "overlay.")
}

// userXattrs lists the lower file's xattrs as they are stored, without
// overlay bookkeeping: stored so in the upper layer they show the same.
func (rv *reverter) userXattrs(lfd int) ([]attest.Xattr, error) {
	names, err := linux.Listxattr(lfd)
	if err != nil {
		return nil, err
	}
	var xs []attest.Xattr
	for _, n := range names {
		if rv.privateName(n) {
			continue
		}
		v, err := linux.Getxattr(lfd, n)
		if err != nil {
			return nil, err
		}
		xs = append(xs, attest.Xattr{Name: n, Value: v})
	}
	return xs, nil
}

// removeUpper removes the upper entry name of udir (stat st), a whole
// directory tree included.
func (rv *reverter) removeUpper(udir int, name string, st linux.Stat) error {
	if !isDirStat(st) {
		return linux.Unlinkat(udir, name, 0)
	}
	fd, err := linux.OpenBeneath(udir, name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	names, err := linux.ReadDirNames(fd)
	for _, n := range names {
		if err != nil {
			break
		}
		var cst linux.Stat
		if cst, err = linux.Lstat(fd, n); err == nil {
			err = rv.removeUpper(fd, n, cst)
		}
	}
	unix.Close(fd)
	if err != nil {
		return err
	}
	return linux.Unlinkat(udir, name, unix.AT_REMOVEDIR)
}

// copyUp copies the lower entry name of ldir (stat lst), with its
// subtree, to name in udir with its metadata.
func (rv *reverter) copyUp(udir, ldir int, name string, lst linux.Stat) error {
	lfd, err := openPath(ldir, name, lst)
	if err != nil {
		return err
	}
	defer unix.Close(lfd)
	if got, err := linux.Lstat(lfd, ""); err != nil || !sameFile(got, lst) {
		return fmt.Errorf("copy up %q: %w", name, errSwapped)
	}
	xs, err := rv.userXattrs(lfd)
	if err != nil {
		return err
	}
	switch lst.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if err := linux.Mkdirat(udir, name, 0o700); err != nil {
			return err
		}
		fd, err := linux.OpenBeneath(udir, name, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		lrd, err := linux.Reopen(lfd, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return err
		}
		defer unix.Close(lrd)
		names, err := linux.ReadDirNames(lrd)
		if err != nil {
			return err
		}
		for _, n := range names {
			cst, ok, err := rv.lowerStat(lrd, n)
			if err != nil {
				return err
			}
			if ok {
				if err := rv.copyUp(fd, lrd, n, cst); err != nil {
					return err
				}
			}
		}
		return rv.setMeta(fd, lst, xs)
	case unix.S_IFREG:
		src, err := linux.Reopen(lfd, unix.O_RDONLY|unix.O_NOCTTY)
		if err != nil {
			return err
		}
		defer unix.Close(src)
		dst, err := linux.Openat(udir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC)
		if err != nil {
			return err
		}
		defer unix.Close(dst)
		if err := applyCopy(dst, src, int64(lst.Size), nil); err != nil {
			return fmt.Errorf("copy up %q: %w", name, err)
		}
		return rv.setMeta(dst, lst, xs)
	case unix.S_IFLNK:
		target, err := linux.Readlinkat(lfd, "")
		if err != nil {
			return err
		}
		if err := linux.Symlinkat(target, udir, name); err != nil {
			return err
		}
	default:
		if err := linux.Mknodat(udir, name, lst.Mode&unix.S_IFMT|0o600, lst.Rdev); err != nil {
			return err
		}
	}
	ust, err := linux.Lstat(udir, name)
	if err != nil {
		return err
	}
	fd, err := openPath(udir, name, ust)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return rv.setMeta(fd, lst, xs)
}

// openPath opens the single component name of dir O_PATH without following
// it: a symlink (stat st) is opened itself, anything else beneath dir
// without crossing a mount.
func openPath(dir int, name string, st linux.Stat) (int, error) {
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return linux.Openat(dir, name, unix.O_PATH|unix.O_NOFOLLOW)
	}
	return linux.OpenBeneath(dir, name, unix.O_PATH)
}

// dirAsLower gives the upper directory name the lower one's metadata and
// makes it opaque, or not.
func (rv *reverter) dirAsLower(udir, ldir int, name string, lst linux.Stat, opaque bool) error {
	fd, err := linux.OpenBeneath(udir, name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	lfd, err := linux.OpenBeneath(ldir, name, unix.O_PATH)
	if err != nil {
		return err
	}
	defer unix.Close(lfd)
	if opaque {
		err = linux.Setxattr(fd, rv.private+"opaque", []byte("y"))
	} else if err = linux.Removexattr(fd, rv.private+"opaque"); errors.Is(err, unix.ENODATA) {
		err = nil
	}
	if err != nil {
		return err
	}
	return rv.dirMeta(fd, lfd, lst)
}
