package overlay

import (
	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
)

// summarize records the upper entry name of u at p, and everything beneath
// it, as one excluded subtree: entries are counted (each charged to the
// entry budget) and regular files' sizes summed, but nothing is classified
// or hashed. A whiteout counts as one entry: the deletion of whatever the
// lower layer holds there. Entries on other mounts and unreadable or
// over-limit directories add their usual reasons. l is the lower
// directory holding name (nil when none shows through).
//
// Some entries are itemized all the same, classified like any other,
// since a count would hide what matters about them: setuid and setgid
// files, device nodes, regular files with several names (one may lie
// outside the subtree, a protected file among them), symlinks whose
// target leaves the subtree, entries that may let someone new write
// (mayGrantWrite), and what git makes a repository of, or runs commands
// through in one (gitItemized).
func (r *reader) summarize(p attest.Path, name string, u, l node) error {
	x := attest.Excluded{Path: p}
	ref, err := u.lstat("")
	if err != nil {
		r.fault(p, "upper", err)
		return nil
	}
	err = r.countTree(&x, p, name, u, l, r.inOpaque, ref)
	if x.Entries > 0 {
		r.excluded = append(r.excluded, x)
	}
	return err
}

// ref is the stat of the upper directory holding the entry, whose grants
// its own are compared with (see mayGrantWrite).
func (r *reader) countTree(x *attest.Excluded, p attest.Path, name string, u, l node, hidden bool, ref linux.Stat) error {
	if !r.count(p, &r.stats.UpperEntries) {
		return nil
	}
	st, err := u.lstat(name)
	if err != nil {
		r.fault(p, "upper", err)
		return nil
	}
	if !r.onMount(st, r.upperRoot) {
		r.reason(attest.OtherMount, p, "upper entry is on another mount: excluded with its subtree")
		return nil
	}
	if r.itemized(x.Path, p, name, u, st) || r.mayGrantWrite(name, u, st, ref, nil) || r.gitItemized(p, name, u, l, hidden) {
		r.stats.UpperEntries-- // child charges it again
		return r.itemize(p, name, u, l, hidden)
	}
	x.Entries++
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		x.Bytes += st.Size
		return nil
	case unix.S_IFDIR:
	default:
		return nil
	}
	d, err := u.open(name, st)
	if err != nil {
		r.fault(p, "upper", err)
		return nil
	}
	defer d.close()
	names, ok := r.list(p, "upper", d)
	if !ok {
		return nil
	}
	// The lower directory beneath, for the entries itemized in it.
	var ld node
	xs, xerr := d.xattrs()
	if xerr == nil && r.mayGrantWrite(name, u, st, ref, xs) {
		x.Entries--
		r.stats.UpperEntries-- // child charges it again
		return r.itemize(p, name, u, l, hidden)
	}
	if xerr == nil && r.opaque(xs) {
		hidden = true
	}
	if l != nil && !hidden {
		if lst, err := l.lstat(name); err == nil && lst.Mode&unix.S_IFMT == unix.S_IFDIR && r.onMount(lst, r.lowerRoot) {
			if ld, err = l.open(name, lst); err == nil {
				defer ld.close()
			} else {
				ld = nil
			}
		}
	}
	for _, c := range names {
		if r.stopped {
			return nil
		}
		if err := r.countTree(x, join(p, c), c, d, ld, hidden || ld == nil, st); err != nil {
			return err
		}
	}
	return nil
}

// itemize classifies the entry name of u at p, in an excluded subtree,
// like any other, with its subtree.
func (r *reader) itemize(p attest.Path, name string, u, l node, hidden bool) error {
	outer := r.inOpaque
	r.inOpaque, r.itemizing = hidden, true
	lower := l
	if hidden {
		lower = nil
	}
	err := r.child(p, name, u, lower)
	r.inOpaque, r.itemizing = outer, false
	return err
}

// opaque reports whether xs mark a directory opaque.
func (r *reader) opaque(xs []attest.Xattr) bool {
	for _, x := range xs {
		if x.Name == r.private+"opaque" && string(x.Value) == "y" {
			return true
		}
	}
	return false
}

// itemized reports whether the upper entry name of u at p (stat st), in
// the excluded subtree at root, must be itemized all the same.
func (r *reader) itemized(root, p attest.Path, name string, u node, st linux.Stat) bool {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 || st.Nlink > 1
	case unix.S_IFBLK:
		return true
	case unix.S_IFCHR:
		return !isWhiteout(st)
	case unix.S_IFLNK:
		n, err := u.open(name, st)
		if err != nil {
			return true // classified, the error becomes its reason
		}
		t, err := n.readlink()
		n.close()
		return err != nil || r.leaves(root, p, t)
	}
	return false
}
