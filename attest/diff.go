package attest

import (
	"bytes"
	"fmt"
	"slices"
)

// Difference is one path whose state in the merged view differs between
// two points of one session, as Diff finds it: the change from the first
// state to the second, the type it has in the second (Type, none when
// deleted) and in the first (Old, none when added).
type Difference struct {
	Path   Path
	Change Change
	Type   Type
	Old    Type
	// From and To are the path's states at the first point and the
	// second (nil where it is absent), for what a view says of the
	// change.
	From, To *State
}

// Diff is what changed in the merged view between two points of one
// session, from a to b (two checkpoints, or a checkpoint and the final
// statement, as Load or Verify give them), in path order. Artifacts of
// two sessions (or of two launch records) are an error wrapping
// ErrOtherSession.
func Diff(a, b *Artifact) ([]Difference, error) {
	sa, la, _, _ := a.summary()
	sb, lb, _, _ := b.summary()
	if sa != sb || !bytes.Equal(la, lb) {
		return nil, fmt.Errorf("%s is of session %s and %s of session %s: %w", a.Path, sa, b.Path, sb, ErrOtherSession)
	}
	return DiffEntries(a.Entries, b.Entries), nil
}

// DiffEntries compares two change lists of one session (each against the
// same lower layer, sorted by path): a path listed in neither is as in
// the lower layer in both; a path listed in one only is as in the lower
// layer in the other. Each path whose merged-view state differs gets the
// change from the first state to the second. Without both digests, files
// of equal size are compared by mtime. It costs one pass over both lists.
func DiffEntries(from, to []Entry) []Difference {
	var out []Difference
	i, j := 0, 0
	for i < len(from) || j < len(to) {
		var a, b *Entry
		switch {
		case j >= len(to) || i < len(from) && from[i].Path < to[j].Path:
			a = &from[i]
			i++
		case i >= len(from) || to[j].Path < from[i].Path:
			b = &to[j]
			j++
		default:
			a, b = &from[i], &to[j]
			i, j = i+1, j+1
		}
		var lower, sa, sb *State
		var p Path
		if a != nil {
			lower, p = a.Old, a.Path
		} else {
			lower, p = b.Old, b.Path
		}
		sa, sb = lower, lower
		if a != nil {
			sa = a.New
		}
		if b != nil {
			sb = b.New
		}
		d := Difference{Path: p, From: sa, To: sb}
		switch {
		case sa == nil && sb == nil:
			continue
		case sa == nil:
			d.Change, d.Type = Added, sb.Type
		case sb == nil:
			d.Change, d.Old = Deleted, sa.Type
		case sa.Type != sb.Type:
			d.Change, d.Type, d.Old = TypeChange, sb.Type, sa.Type
		case contentDiffers(sa, sb):
			d.Change, d.Type, d.Old = Modified, sb.Type, sa.Type
		case metaDiffers(sa, sb):
			d.Change, d.Type, d.Old = Metadata, sb.Type, sa.Type
		case b != nil && b.Change == Replaced && (a == nil || a.Change != Replaced):
			d.Change, d.Type, d.Old = Replaced, sb.Type, sa.Type
		default:
			continue
		}
		out = append(out, d)
	}
	return out
}

// contentDiffers compares what two states of one type hold. Without both
// digests, files of equal size are compared by mtime.
func contentDiffers(a, b *State) bool {
	switch a.Type {
	case File:
		if a.Size != b.Size {
			return true
		}
		if a.SHA256 != nil && b.SHA256 != nil {
			return !bytes.Equal(a.SHA256, b.SHA256)
		}
		return a.MtimeNS != b.MtimeNS
	case Symlink:
		return a.Target != b.Target
	case CharDev, BlockDev:
		return a.Rdev != b.Rdev
	}
	return false
}

// metaDiffers compares two states' metadata: mode, owner, mtime, the
// path a file is a hard link to, and xattrs.
func metaDiffers(a, b *State) bool {
	return a.Mode != b.Mode || a.UID != b.UID || a.GID != b.GID || a.MtimeNS != b.MtimeNS || a.Link != b.Link ||
		!slices.EqualFunc(a.Xattrs, b.Xattrs, func(x, y Xattr) bool { return x.Name == y.Name && bytes.Equal(x.Value, y.Value) })
}
