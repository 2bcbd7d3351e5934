// Package posixacl decodes the POSIX access control lists Linux keeps in
// the extended attributes system.posix_acl_access (who may do what to a
// file or directory) and system.posix_acl_default (what a directory's new
// children get).
//
// The value is little-endian: a 4-byte version, which must be 2, then
// 8-byte entries, each a 2-byte tag, a 2-byte permission set (read 4,
// write 2, execute 1) and a 4-byte id (a uid for TagUser, a gid for
// TagGroup, 0xFFFFFFFF otherwise). Parse refuses any other shape.
package posixacl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// The extended attributes that hold ACLs.
const (
	AccessXattr  = "system.posix_acl_access"
	DefaultXattr = "system.posix_acl_default"
)

// Tag says whom an entry is about.
type Tag uint16

// The tags Linux writes.
const (
	TagUserObj  Tag = 0x01 // the owner
	TagUser     Tag = 0x02 // a named user (ID)
	TagGroupObj Tag = 0x04 // the owning group
	TagGroup    Tag = 0x08 // a named group (ID)
	TagMask     Tag = 0x10 // the most any TagUser, TagGroupObj or TagGroup entry grants
	TagOther    Tag = 0x20 // everyone else
)

// The permission bits of an entry.
const (
	Read    = 4
	Write   = 2
	Execute = 1
)

// Entry is one entry of an ACL.
type Entry struct {
	Tag  Tag
	Perm uint16 // Read|Write|Execute
	ID   uint32 // for TagUser and TagGroup; 0 otherwise
}

// ACL is a decoded ACL, its entries in the order stored.
type ACL []Entry

const (
	version   = 2
	entrySize = 8
	noID      = 0xFFFFFFFF
	// maxEntries bounds an ACL: Linux refuses more than 32 entries on
	// most filesystems and about 8,000 on any.
	maxEntries = 1 << 14
)

// ErrMalformed is wrapped by Parse's errors.
var ErrMalformed = errors.New("malformed POSIX ACL")

// Parse decodes an ACL xattr's value.
func Parse(b []byte) (ACL, error) {
	if len(b) < 4 || (len(b)-4)%entrySize != 0 {
		return nil, fmt.Errorf("%w: %d bytes", ErrMalformed, len(b))
	}
	if v := binary.LittleEndian.Uint32(b); v != version {
		return nil, fmt.Errorf("%w: version %d", ErrMalformed, v)
	}
	n := (len(b) - 4) / entrySize
	if n > maxEntries {
		return nil, fmt.Errorf("%w: %d entries", ErrMalformed, n)
	}
	out := make(ACL, 0, n)
	for i := 0; i < n; i++ {
		e := b[4+i*entrySize:]
		en := Entry{
			Tag:  Tag(binary.LittleEndian.Uint16(e)),
			Perm: binary.LittleEndian.Uint16(e[2:]),
			ID:   binary.LittleEndian.Uint32(e[4:]),
		}
		switch en.Tag {
		case TagUser, TagGroup:
		case TagUserObj, TagGroupObj, TagMask, TagOther:
			en.ID = 0
		default:
			return nil, fmt.Errorf("%w: entry %d has tag %#x", ErrMalformed, i, uint16(en.Tag))
		}
		if en.Perm&^(Read|Write|Execute) != 0 {
			return nil, fmt.Errorf("%w: entry %d has permissions %#x", ErrMalformed, i, en.Perm)
		}
		out = append(out, en)
	}
	return out, nil
}

// Mask returns the permissions of the ACL's TagMask entry, and
// Read|Write|Execute when it has none.
func (a ACL) Mask() uint16 {
	for _, e := range a {
		if e.Tag == TagMask {
			return e.Perm
		}
	}
	return Read | Write | Execute
}

// Effective returns what e grants in a: its permissions limited by the
// mask for TagUser, TagGroupObj and TagGroup entries.
func (a ACL) Effective(e Entry) uint16 {
	switch e.Tag {
	case TagUser, TagGroupObj, TagGroup:
		return e.Perm & a.Mask()
	}
	return e.Perm
}

// String writes e as getfacl does: "user::rw-", "user:1000:rwx",
// "group::r-x", "group:50:r--", "mask::rwx", "other::r--", with numeric
// ids.
func (e Entry) String() string {
	var who string
	switch e.Tag {
	case TagUserObj:
		who = "user:"
	case TagUser:
		who = fmt.Sprintf("user:%d", e.ID)
	case TagGroupObj:
		who = "group:"
	case TagGroup:
		who = fmt.Sprintf("group:%d", e.ID)
	case TagMask:
		who = "mask:"
	case TagOther:
		who = "other:"
	default:
		who = fmt.Sprintf("tag%#x:%d", uint16(e.Tag), e.ID)
	}
	return who + ":" + Perms(e.Perm)
}

// String writes a's entries as String does, separated by commas.
func (a ACL) String() string {
	s := make([]string, len(a))
	for i, e := range a {
		s[i] = e.String()
	}
	return strings.Join(s, ",")
}

// Perms writes permission bits as "rwx", a dash for each one missing.
func Perms(p uint16) string {
	b := []byte("---")
	if p&Read != 0 {
		b[0] = 'r'
	}
	if p&Write != 0 {
		b[1] = 'w'
	}
	if p&Execute != 0 {
		b[2] = 'x'
	}
	return string(b)
}

// Encode is Parse's inverse, for tests and for writing ACLs.
func Encode(a ACL) []byte {
	b := make([]byte, 4, 4+len(a)*entrySize)
	binary.LittleEndian.PutUint32(b, version)
	for _, e := range a {
		id := e.ID
		if e.Tag != TagUser && e.Tag != TagGroup {
			id = noID
		}
		b = binary.LittleEndian.AppendUint16(b, uint16(e.Tag))
		b = binary.LittleEndian.AppendUint16(b, e.Perm)
		b = binary.LittleEndian.AppendUint32(b, id)
	}
	return b
}
