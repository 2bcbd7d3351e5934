package overlay

import (
	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
)

// The extended attributes of POSIX ACLs (see internal/posixacl).
const (
	aclAccess  = "system.posix_acl_access"
	aclDefault = "system.posix_acl_default"
)

// mayGrantWrite reports whether the upper entry name of u (stat st), in
// an excluded subtree, may let someone write whom the upper directory
// holding it (stat ref) does not let write: it is then itemized with its
// subtree, so that the rules on what a change grants are checked on it as
// anywhere else. An ordinary tree (an npm install: one owner, the modes of
// one umask) is decided from stat alone. Itemized:
//
//   - an owner other than ref's, but root (who is never a new writer);
//   - other-writable, unless ref is;
//   - group-writable, unless ref is for the same group; and when ref is,
//     one with an access ACL: a named entry that writes sets the ACL's
//     mask, which the group bits show, so only then are a file's xattrs
//     read;
//   - a setgid directory (its new entries take its group), unless ref's
//     group writes ref;
//   - a directory with a default ACL (its new entries get it).
//
// Symlinks and device nodes grant nothing here (device nodes are itemized
// anyway). xs are the xattrs of a directory once read (nil before): the
// ACL checks of a directory wait for them. Since each entry is compared
// with the directory holding it, an entry that is not itemized grants no
// more than the subtree's root, which is compared with the directory
// holding the subtree. Not seen from here: a directory that loses its
// sticky bit but keeps its write bits (its old state is not read).
func (r *reader) mayGrantWrite(name string, u node, st, ref linux.Stat, xs []attest.Xattr) bool {
	typ := st.Mode & unix.S_IFMT
	switch typ {
	case unix.S_IFLNK, unix.S_IFCHR, unix.S_IFBLK:
		return false
	}
	groupWrites := ref.Mode&0o020 != 0 && st.GID == ref.GID
	switch {
	case st.UID != ref.UID && st.UID != 0,
		st.Mode&0o002 != 0 && ref.Mode&0o002 == 0,
		st.Mode&0o020 != 0 && !groupWrites,
		typ == unix.S_IFDIR && st.Mode&unix.S_ISGID != 0 && !groupWrites:
		return true
	}
	if typ == unix.S_IFDIR {
		return hasXattr(xs, aclDefault) || st.Mode&0o020 != 0 && hasXattr(xs, aclAccess)
	}
	if typ != unix.S_IFREG || st.Mode&0o020 == 0 {
		return false
	}
	n, err := u.open(name, st)
	if err != nil {
		return true // classified, the error becomes its reason
	}
	defer n.close()
	fxs, err := n.xattrs()
	return err != nil || hasXattr(fxs, aclAccess)
}

func hasXattr(xs []attest.Xattr, name string) bool {
	for _, x := range xs {
		if x.Name == name {
			return true
		}
	}
	return false
}
