package policy

import (
	"fmt"
	"slices"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/posixacl"
)

// RuleGrantsWrite is the built-in rule a change breaks when it gives write
// access to someone who could not write there before the run: once
// applied, that user could rewrite what the operator's tools run (a
// repository's config, a script), as the operator.
const RuleGrantsWrite = "(grants write)"

// A Principal is someone the kernel lets write a file: a user, the
// members of a group, or everyone.
type Principal struct {
	Kind PrincipalKind
	ID   uint32 // uid or gid; 0 for Everyone
}

// PrincipalKind says what a Principal's ID names.
type PrincipalKind uint8

// The kinds of Principal.
const (
	User PrincipalKind = iota + 1
	Group
	Everyone
)

// String writes p as "user 1000", "group 50" or "everyone".
func (p Principal) String() string {
	switch p.Kind {
	case User:
		return fmt.Sprintf("user %d", p.ID)
	case Group:
		return fmt.Sprintf("group %d", p.ID)
	}
	return "everyone"
}

// writers are the principals a state lets write: Entry may write the
// entry itself (a file's contents; a directory's list of entries), Within,
// for a directory, may write what is in it (replace any of its entries,
// or write the new entries made there).
type writers struct {
	Entry, Within []Principal
}

// NewWriters returns the principals that the state new lets write and
// that could not write there before the run, sorted, without repeats: a
// change that makes any is a RuleGrantsWrite violation. old is the
// entry's state before the run (nil when it was added); dir is the state
// before the run of the directory it lies in, in the workspace: the
// nearest ancestor that was a directory there (nil for the workspace
// root, attest.Root, which is compared with its old state alone).
//
// Who may write a state: its owner (who can always chmod); its group when
// it is group-writable and everyone when it is other-writable; with an
// access ACL (system.posix_acl_access), which the kernel checks instead of
// the group bits, each named user, the owning group and each named group
// whose entry, after the mask, includes write, and everyone when the
// "other" entry does. A symlink lets no one write anything (its own
// permissions are never checked). For a directory, who may write what is
// in it: those who may write the directory — but for a sticky directory
// only its owner, since the sticky bit keeps the others from replacing
// entries they do not own —, each entry of its default ACL
// (system.posix_acl_default) that includes write after the default mask
// (its new children get it: a named user or group, "other" for everyone,
// the owning group when the directory is setgid), and its group when the
// directory is setgid (its new children take that group, and a umask of
// 002 lets the group write them).
//
// What could write there before: whoever could write old (so a file that
// was already 0666 grants nothing new), and whoever could write what is
// in dir (they could already replace the entry by another). Each part is
// compared on its own: a directory that loses its sticky bit lets those
// who could only add entries replace others' entries, a new right though
// they could write it before. A directory made group-writable lets its
// group in even when that group owns the workspace, unless it could write
// dir. uid 0 is never new (gid 0 is a group like any other). Group
// membership is not known here: a change of group to one whose members
// could not write is new even when the same people are in both.
//
// An access or default ACL of new that does not decode is taken to let
// everyone write; one of old or dir that does not decode grants nothing
// there.
func NewWriters(old, new, dir *attest.State) []Principal {
	if new == nil {
		return nil
	}
	n := writersOf(new, true)
	o := writersOf(old, false)
	d := writersOf(dir, false)
	var out []Principal
	for _, part := range [][2][]Principal{{n.Entry, o.Entry}, {n.Within, o.Within}} {
		for _, p := range part[0] {
			if p == (Principal{User, 0}) || slices.Contains(part[1], p) || slices.Contains(d.Within, p) {
				continue
			}
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b Principal) int {
		if a.Kind != b.Kind {
			return int(a.Kind) - int(b.Kind)
		}
		return int(int64(a.ID) - int64(b.ID))
	})
	return slices.Compact(out)
}

// GrantViolation returns RuleGrantsWrite when the change at p from old to
// new (see NewWriters) lets someone new write and no allow covers p, ""
// otherwise.
func (r *Rules) GrantViolation(p attest.Path, old, new, dir *attest.State) string {
	if len(NewWriters(old, new, dir)) == 0 || r.Allowed(p) {
		return ""
	}
	return RuleGrantsWrite
}

// writersOf returns whom s lets write (see NewWriters); strict: an ACL
// that does not decode lets everyone write, otherwise it is ignored.
func writersOf(s *attest.State, strict bool) writers {
	var w writers
	if s == nil || s.Type == attest.Symlink {
		return w
	}
	add := func(to *[]Principal, k PrincipalKind, id uint32) { *to = append(*to, Principal{k, id}) }
	add(&w.Entry, User, s.UID)
	access, ok := aclOf(s, posixacl.AccessXattr)
	switch {
	case !ok && strict:
		add(&w.Entry, Everyone, 0)
	case access != nil:
		w.Entry = append(w.Entry, aclWriters(access, &s.GID)...)
	default:
		if s.Mode&0o020 != 0 {
			add(&w.Entry, Group, s.GID)
		}
		if s.Mode&0o002 != 0 {
			add(&w.Entry, Everyone, 0)
		}
	}
	if s.Type != attest.Dir {
		return w
	}
	setgid := s.Mode&0o2000 != 0
	if s.Mode&0o1000 != 0 {
		add(&w.Within, User, s.UID)
	} else {
		w.Within = append(w.Within, w.Entry...)
	}
	if setgid {
		add(&w.Within, Group, s.GID)
	}
	def, ok := aclOf(s, posixacl.DefaultXattr)
	if !ok && strict {
		add(&w.Within, Everyone, 0)
	}
	var group *uint32 // a new child's group: the directory's when setgid
	if setgid {
		group = &s.GID
	}
	w.Within = append(w.Within, aclWriters(def, group)...)
	return w
}

// aclWriters returns whom a's entries let write, after the mask: named
// users and groups, everyone for the other entry, and group for the
// owning group's entry unless group is nil. The owner's entry adds no
// one: the owner counts already.
func aclWriters(a posixacl.ACL, group *uint32) []Principal {
	var out []Principal
	for _, e := range a {
		if a.Effective(e)&posixacl.Write == 0 {
			continue
		}
		switch e.Tag {
		case posixacl.TagUser:
			out = append(out, Principal{User, e.ID})
		case posixacl.TagGroupObj:
			if group != nil {
				out = append(out, Principal{Group, *group})
			}
		case posixacl.TagGroup:
			out = append(out, Principal{Group, e.ID})
		case posixacl.TagOther:
			out = append(out, Principal{Everyone, 0})
		}
	}
	return out
}

// aclOf decodes s's ACL xattr name: nil, true when s has none; nil, false
// when it does not decode.
func aclOf(s *attest.State, name string) (posixacl.ACL, bool) {
	for _, x := range s.Xattrs {
		if x.Name == name {
			a, err := posixacl.Parse(x.Value)
			return a, err == nil
		}
	}
	return nil, true
}
