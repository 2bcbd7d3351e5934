package review

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/posixacl"
)

// Meta is what differs in a path's metadata between its old and new
// state: each field that changed, old and new, and nothing for a field
// that did not. Metadata builds it; String is its text, and its JSON
// form (the field tags) is what --json views carry.
type Meta struct {
	Mode *ModeChange `json:"mode,omitempty"`
	UID  *IDChange   `json:"uid,omitempty"`
	GID  *IDChange   `json:"gid,omitempty"`
	// ACL lists the POSIX ACL entries removed and added, access ACL
	// first, then default ACL, each in the kernel's order (tag, then id).
	ACL []ACLChange `json:"acl,omitempty"`
	// Xattrs are the other extended attributes added, removed or
	// changed, by name.
	Xattrs []XattrChange `json:"xattrs,omitempty"`
	// Mtime is set only when nothing else about the path changed.
	Mtime *MtimeChange `json:"mtime,omitempty"`
}

// ModeChange is a change of permission bits (07777: setuid, setgid and
// sticky included).
type ModeChange struct {
	Old uint32 `json:"old"`
	New uint32 `json:"new"`
}

// IDChange is a change of owner (uid) or group (gid).
type IDChange struct {
	Old uint32 `json:"old"`
	New uint32 `json:"new"`
}

// MtimeChange is a change of modification time, in nanoseconds since
// the Unix epoch (decimal strings in JSON, as in a statement).
type MtimeChange struct {
	Old int64 `json:"old_ns,string"`
	New int64 `json:"new_ns,string"`
}

// ACLChange is one ACL entry removed (attest.Deleted) or added
// (attest.Added); an entry whose permissions changed is removed with the
// old ones and added with the new.
type ACLChange struct {
	Change attest.Change `json:"change"`
	// Default: an entry of system.posix_acl_default (what a directory's
	// new children get); otherwise of system.posix_acl_access.
	Default bool `json:"default"`
	// Entry is the entry as getfacl writes it ("user:1000:rwx"), without
	// the "default:" prefix.
	Entry string `json:"entry"`
	// Tag is whom the entry is about: user_obj (the owner), user, group_obj
	// (the owning group), group, mask or other; ID is the uid or gid of a
	// user or group entry.
	Tag   string  `json:"tag"`
	ID    *uint32 `json:"id,omitempty"`
	Perms string  `json:"perms"` // "rwx", a dash for each one missing
	// Effective is what the entry grants once the ACL's mask limits it,
	// when that is less than Perms.
	Effective string `json:"effective,omitempty"`
}

// XattrChange is one extended attribute added (attest.Added), removed
// (attest.Deleted) or given another value (attest.Modified). Values are
// the agent's: they are kept only up to XattrShown bytes.
type XattrChange struct {
	Name    attest.Bytes  `json:"name"`
	Change  attest.Change `json:"change"`
	OldSize int           `json:"old_size"`
	NewSize int           `json:"new_size"`
	// OldValue and NewValue are the values when at most XattrShown bytes
	// long, nil otherwise and for an absent side.
	OldValue []byte `json:"old_value,omitempty"`
	NewValue []byte `json:"new_value,omitempty"`
}

// XattrShown is the longest xattr value Meta keeps and shows.
const XattrShown = 64

// Metadata is what differs between e's old and new metadata: mode
// (unless a side is a symlink, whose mode is unused), owner, group, the POSIX ACLs decoded (an ACL value that does not
// decode is shown as an other xattr), the other xattrs by name, and the
// mtime only when e is a metadata change (attest.Metadata) and nothing
// else differs. It is nil when e has no old or no new state, or nothing
// of these differs.
func Metadata(e attest.Entry) *Meta {
	if e.Old == nil || e.New == nil {
		return nil
	}
	a, b := e.Old, e.New
	m := &Meta{}
	if a.Mode != b.Mode && a.Type != attest.Symlink && b.Type != attest.Symlink {
		m.Mode = &ModeChange{a.Mode, b.Mode}
	}
	if a.UID != b.UID {
		m.UID = &IDChange{a.UID, b.UID}
	}
	if a.GID != b.GID {
		m.GID = &IDChange{a.GID, b.GID}
	}
	skip := map[string]bool{}
	for _, name := range []string{posixacl.AccessXattr, posixacl.DefaultXattr} {
		changes, ok := aclChanges(a, b, name)
		if ok {
			m.ACL = append(m.ACL, changes...)
			skip[name] = true
		}
	}
	m.Xattrs = xattrChanges(a.Xattrs, b.Xattrs, skip)
	if e.Change == attest.Metadata && m.empty() && a.MtimeNS != b.MtimeNS {
		m.Mtime = &MtimeChange{a.MtimeNS, b.MtimeNS}
	}
	if m.empty() && m.Mtime == nil {
		return nil
	}
	return m
}

// PatchMetadata is Metadata for a patch: nil also for a directory whose
// only change is its mtime, which every entry made or removed in it
// changes (the patch shows those entries).
func PatchMetadata(e attest.Entry) *Meta {
	m := Metadata(e)
	if m != nil && m.Mtime != nil && e.New.Type == attest.Dir {
		return nil
	}
	return m
}

func (m *Meta) empty() bool {
	return m.Mode == nil && m.UID == nil && m.GID == nil && len(m.ACL) == 0 && len(m.Xattrs) == 0
}

func xattrValue(s *attest.State, name string) ([]byte, bool) {
	i, ok := slices.BinarySearchFunc(s.Xattrs, name, func(x attest.Xattr, n string) int { return strings.Compare(x.Name, n) })
	if !ok {
		return nil, false
	}
	return s.Xattrs[i].Value, true
}

// aclChanges compares the ACL in xattr name of a and b. An access ACL
// absent from one side is the one its mode bits make (owner, group,
// other); a default ACL absent is empty. The owner and other entries of
// an access ACL are the mode's bits, which the mode shows: they are left
// out. It reports false when neither side holds the xattr or a side's
// value does not decode.
func aclChanges(a, b *attest.State, name string) ([]ACLChange, bool) {
	av, aok := xattrValue(a, name)
	bv, bok := xattrValue(b, name)
	if !aok && !bok {
		return nil, false
	}
	def := name == posixacl.DefaultXattr
	read := func(s *attest.State, v []byte, ok bool) (posixacl.ACL, error) {
		switch {
		case ok:
			return posixacl.Parse(v)
		case def:
			return nil, nil
		}
		return posixacl.ACL{
			{Tag: posixacl.TagUserObj, Perm: uint16(s.Mode>>6) & 7},
			{Tag: posixacl.TagGroupObj, Perm: uint16(s.Mode>>3) & 7},
			{Tag: posixacl.TagOther, Perm: uint16(s.Mode) & 7},
		}, nil
	}
	old, err := read(a, av, aok)
	if err != nil {
		return nil, false
	}
	nw, err := read(b, bv, bok)
	if err != nil {
		return nil, false
	}
	type key struct {
		tag posixacl.Tag
		id  uint32
	}
	keyOf := func(e posixacl.Entry) key { return key{e.Tag, e.ID} }
	index := func(acl posixacl.ACL) map[key]posixacl.Entry {
		m := make(map[key]posixacl.Entry, len(acl))
		for _, e := range acl {
			m[keyOf(e)] = e
		}
		return m
	}
	om, nm := index(old), index(nw)
	var keys []key
	for k := range om {
		keys = append(keys, k)
	}
	for k := range nm {
		if _, ok := om[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(x, y key) int {
		if x.tag != y.tag {
			return cmp.Compare(x.tag, y.tag)
		}
		return cmp.Compare(x.id, y.id)
	})
	var out []ACLChange
	for _, k := range keys {
		if !def && (k.tag == posixacl.TagUserObj || k.tag == posixacl.TagOther) {
			continue
		}
		o, inOld := om[k]
		n, inNew := nm[k]
		if inOld && inNew && o.Perm == n.Perm {
			continue
		}
		if inOld {
			out = append(out, aclChange(attest.Deleted, def, old, o))
		}
		if inNew {
			out = append(out, aclChange(attest.Added, def, nw, n))
		}
	}
	return out, true
}

var tagNames = map[posixacl.Tag]string{
	posixacl.TagUserObj:  "user_obj",
	posixacl.TagUser:     "user",
	posixacl.TagGroupObj: "group_obj",
	posixacl.TagGroup:    "group",
	posixacl.TagMask:     "mask",
	posixacl.TagOther:    "other",
}

func aclChange(c attest.Change, def bool, acl posixacl.ACL, e posixacl.Entry) ACLChange {
	ch := ACLChange{Change: c, Default: def, Entry: e.String(), Tag: tagNames[e.Tag], Perms: posixacl.Perms(e.Perm)}
	if e.Tag == posixacl.TagUser || e.Tag == posixacl.TagGroup {
		id := e.ID
		ch.ID = &id
	}
	if eff := acl.Effective(e); eff != e.Perm {
		ch.Effective = posixacl.Perms(eff)
	}
	return ch
}

// xattrChanges compares two sorted xattr lists by name, leaving out the
// names in skip.
func xattrChanges(a, b []attest.Xattr, skip map[string]bool) []XattrChange {
	var out []XattrChange
	shown := func(v []byte) []byte {
		if len(v) > XattrShown {
			return nil
		}
		return v
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		var x XattrChange
		switch {
		case j >= len(b) || i < len(a) && a[i].Name < b[j].Name:
			x = XattrChange{Name: attest.Bytes(a[i].Name), Change: attest.Deleted, OldSize: len(a[i].Value), OldValue: shown(a[i].Value)}
			i++
		case i >= len(a) || b[j].Name < a[i].Name:
			x = XattrChange{Name: attest.Bytes(b[j].Name), Change: attest.Added, NewSize: len(b[j].Value), NewValue: shown(b[j].Value)}
			j++
		default:
			same := string(a[i].Value) == string(b[j].Value)
			x = XattrChange{Name: attest.Bytes(a[i].Name), Change: attest.Modified,
				OldSize: len(a[i].Value), OldValue: shown(a[i].Value), NewSize: len(b[j].Value), NewValue: shown(b[j].Value)}
			i, j = i+1, j+1
			if same {
				continue
			}
		}
		if !skip[string(x.Name)] {
			out = append(out, x)
		}
	}
	return out
}

// String is m in one line, the fields that changed separated by "; ":
//
//	mode 0644 -> 4755 (+setuid)
//	uid 0 -> 65534
//	gid 0 -> 50
//	acl +user:1000:rwx (effective r--), -group:50:r--, +default:user:1000:rwx
//	xattr +user.note="x", -user.old=(300 bytes), user.v="a" -> "b"
//	mtime 2020-01-02T03:04:05.000006Z -> 2024-05-01T00:00:00Z
//
// Modes are four octal digits, with the setuid, setgid and sticky bits
// gained (+) or lost (-) named; ACL entries are written as getfacl does;
// xattr names are in attest's text form (%XX for control bytes, invalid
// UTF-8 and invisible characters) and values of at most XattrShown bytes
// quoted with every byte outside printable ASCII escaped, longer ones by
// size: the text holds no byte a terminal acts on, and no newline.
func (m *Meta) String() string {
	if m == nil {
		return ""
	}
	var parts []string
	if m.Mode != nil {
		parts = append(parts, fmt.Sprintf("mode %04o -> %04o%s", m.Mode.Old, m.Mode.New, specialBits(m.Mode.Old, m.Mode.New)))
	}
	if m.UID != nil {
		parts = append(parts, fmt.Sprintf("uid %d -> %d", m.UID.Old, m.UID.New))
	}
	if m.GID != nil {
		parts = append(parts, fmt.Sprintf("gid %d -> %d", m.GID.Old, m.GID.New))
	}
	if len(m.ACL) > 0 {
		es := make([]string, len(m.ACL))
		for i, c := range m.ACL {
			es[i] = c.String()
		}
		parts = append(parts, "acl "+strings.Join(es, ", "))
	}
	if len(m.Xattrs) > 0 {
		xs := make([]string, len(m.Xattrs))
		for i, x := range m.Xattrs {
			xs[i] = x.String()
		}
		parts = append(parts, "xattr "+strings.Join(xs, ", "))
	}
	if m.Mtime != nil {
		parts = append(parts, "mtime "+mtimeText(m.Mtime.Old)+" -> "+mtimeText(m.Mtime.New))
	}
	return strings.Join(parts, "; ")
}

// String is c as getfacl writes it, after "+" or "-", with "default:"
// for a default ACL's entry and " (effective PERMS)" when the mask
// limits it.
func (c ACLChange) String() string {
	s := "+"
	if c.Change == attest.Deleted {
		s = "-"
	}
	if c.Default {
		s += "default:"
	}
	s += c.Entry
	if c.Effective != "" {
		s += " (effective " + c.Effective + ")"
	}
	return s
}

// String is x as Meta.String writes it: "+NAME=VALUE" added,
// "-NAME=VALUE" removed, "NAME=OLD -> NEW" changed.
func (x XattrChange) String() string {
	name := x.Name.String()
	switch x.Change {
	case attest.Added:
		return "+" + name + "=" + valueText(x.NewValue, x.NewSize)
	case attest.Deleted:
		return "-" + name + "=" + valueText(x.OldValue, x.OldSize)
	}
	return name + "=" + valueText(x.OldValue, x.OldSize) + " -> " + valueText(x.NewValue, x.NewSize)
}

// valueText quotes a value kept (every byte outside printable ASCII
// escaped), or gives the size of one not kept.
func valueText(v []byte, size int) string {
	if len(v) == size && size <= XattrShown {
		return strconv.QuoteToASCII(string(v))
	}
	return fmt.Sprintf("(%d bytes)", size)
}

// specialBits names the setuid, setgid and sticky bits gained or lost.
func specialBits(old, new uint32) string {
	var s []string
	for _, b := range []struct {
		bit  uint32
		name string
	}{{0o4000, "setuid"}, {0o2000, "setgid"}, {0o1000, "sticky"}} {
		switch {
		case old&b.bit == 0 && new&b.bit != 0:
			s = append(s, "+"+b.name)
		case old&b.bit != 0 && new&b.bit == 0:
			s = append(s, "-"+b.name)
		}
	}
	if len(s) == 0 {
		return ""
	}
	return " (" + strings.Join(s, ", ") + ")"
}

func mtimeText(ns int64) string {
	return time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
}

// writeMeta writes d's metadata note, if any (see WritePatch).
func (d *Diff) writeMeta(b *strings.Builder, c *Colors) {
	if d.Meta == nil {
		return
	}
	line := "# metadata of " + Quote(string(d.Path)) + ": " + d.Meta.String()
	if c.Escape != nil {
		line = c.Escape(line)
	}
	b.WriteString(c.Meta + line + c.Reset + "\n")
}
