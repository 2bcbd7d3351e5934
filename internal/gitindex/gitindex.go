// Package gitindex reads git's index file (.git/index), strictly: the
// entries' paths, modes, object ids and the flags by which git stops
// looking at a file in the work tree (assume-unchanged, skip-worktree).
// Parse is the one entry point; it reads the whole file or fails, and an
// index it cannot read is an error, never an empty index.
//
// The format (git's Documentation/gitformat-index.txt), all integers
// big-endian:
//
//	header    "DIRC", version (4 bytes: 2, 3 or 4), entry count (4 bytes)
//	entries   count times, sorted by path bytes, then stage:
//	            ctime, mtime (4+4 bytes each), dev, ino, mode, uid, gid,
//	            size (4 bytes each), object id (20 bytes for SHA-1, 32
//	            for SHA-256), flags (2 bytes: 0x8000 assume-valid, the
//	            "assume unchanged" bit; 0x4000 extended; 0x3000 stage;
//	            0x0FFF the path's length, 0xFFF when longer), then, when
//	            extended (version 3 and later), extended flags (2 bytes:
//	            0x4000 skip-worktree, 0x2000 intent-to-add, no other bit),
//	            then the path:
//	            version 2 and 3: the path, then 1 to 8 NULs so that the
//	              entry's length is a multiple of 8;
//	            version 4: a number N (git's varint: 7 bits a byte, high
//	              bit "more", each continuation adding one), then a
//	              NUL-terminated suffix: the path is the previous entry's
//	              path less its last N bytes, then the suffix.
//	extensions  each a 4-byte signature, a 4-byte size and that many
//	            bytes; one whose signature starts with 'A'..'Z' is
//	            optional and skipped, any other must be understood.
//	checksum  the hash (SHA-1 or SHA-256) of everything before it.
//
// Parse finds the hash function by the checksum: the file is SHA-1's
// when its last 20 bytes are the SHA-1 of the rest, SHA-256's when its
// last 32 bytes are the SHA-256 of the rest. A checksum of zeros is git's
// index.skipHash (no checksum written): the file must then parse with
// one hash function's layout and not the other's. It refuses the two
// extensions it does not read, which change what the entries mean: a
// split index ("link": most entries are in .git/sharedindex.<hex>) and a
// sparse index ("sdir": a directory entry stands for a whole subtree),
// with ErrUnsupported.
package gitindex

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// Limits on what Parse reads.
const (
	// MaxSize is the largest index Parse reads: about 1.3 million
	// entries with short paths (the Linux kernel's index is about 10
	// MiB).
	MaxSize = 128 << 20
	// MaxEntries is the most entries Parse accepts.
	MaxEntries = 1 << 21
	// MaxPathBytes is the most bytes all entries' paths may hold
	// together: version 4's prefix compression lets a small file name
	// long paths many times over.
	MaxPathBytes = 2 * MaxSize
)

// ErrUnsupported is returned (wrapped) for an index in a form Parse does
// not read fully: a split or sparse index. Such an index is not known to
// be clean.
var ErrUnsupported = errors.New("git index form not supported")

// Mode values of an entry (the file's type and permissions, as in a tree).
const (
	ModeFile    = 0o100644
	ModeExec    = 0o100755
	ModeSymlink = 0o120000
	ModeGitlink = 0o160000 // a submodule's commit: git runs git in the directory
	// modeDir is a sparse index's directory entry, which Parse refuses.
	modeDir = 0o40000
)

// Hash is an object format.
type Hash int

// The object formats git knows.
const (
	SHA1   Hash = 20
	SHA256 Hash = 32
)

// Entry is one entry of an index.
type Entry struct {
	Path  []byte // as stored: no NUL, never empty
	Mode  uint32 // one of the Mode values
	OID   []byte // the object id, 20 or 32 bytes
	Stage int    // 0, or 1..3 during a merge with conflicts
	// AssumeValid is git update-index --assume-unchanged: git takes the
	// file in the work tree as unchanged without looking at it.
	AssumeValid bool
	// SkipWorktree is git update-index --skip-worktree (and sparse
	// checkout): git neither looks at nor writes the work tree's file.
	SkipWorktree bool
	// IntentToAdd is git add -N.
	IntentToAdd bool
}

// Index is a parsed index.
type Index struct {
	Version int
	Hash    Hash
	Entries []Entry
}

const (
	flagAssumeValid   = 0x8000
	flagExtended      = 0x4000
	flagStage         = 0x3000
	flagNameMask      = 0x0fff
	xflagSkipWorktree = 0x4000
	xflagIntentToAdd  = 0x2000
	statBytes         = 40 // ctime, mtime, dev, ino, mode, uid, gid, size
)

// Parse reads the index b (see the package doc for the format and what
// is refused). Errors name what was wrong.
func Parse(b []byte) (*Index, error) {
	if len(b) > MaxSize {
		return nil, fmt.Errorf("git index: %d bytes, more than %d", len(b), MaxSize)
	}
	var h Hash
	switch {
	case checksum(b, SHA1):
		h = SHA1
	case checksum(b, SHA256):
		h = SHA256
	case zeros(b, SHA1) || zeros(b, SHA256):
		return unchecked(b)
	default:
		return nil, errors.New("git index: the trailing checksum is neither the SHA-1 nor the SHA-256 of the index")
	}
	ix, err := parse(b[:len(b)-int(h)], h)
	if err != nil {
		return nil, fmt.Errorf("git index: %w", err)
	}
	return ix, nil
}

// zeros reports whether b ends in a checksum of h's size that is all
// zeros.
func zeros(b []byte, h Hash) bool {
	n := len(b) - int(h)
	return n >= 12 && bytes.Count(b[n:], []byte{0}) == int(h)
}

// unchecked parses an index written without a checksum (git's
// index.skipHash, which feature.manyFiles turns on: the trailer is all
// zeros), whose hash function only the layout tells: it must parse as
// one of SHA-1's and SHA-256's, not both.
func unchecked(b []byte) (*Index, error) {
	var found *Index
	var errs []error
	for _, h := range []Hash{SHA1, SHA256} {
		if !zeros(b, h) {
			continue
		}
		ix, err := parse(b[:len(b)-int(h)], h)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if found != nil {
			return nil, errors.New("git index: without a checksum, reads as SHA-1's and as SHA-256's")
		}
		found = ix
	}
	if found == nil {
		return nil, fmt.Errorf("git index: without a checksum: %w", errors.Join(errs...))
	}
	return found, nil
}

func checksum(b []byte, h Hash) bool {
	n := len(b) - int(h)
	if n < 12 {
		return false
	}
	switch h {
	case SHA1:
		s := sha1.Sum(b[:n])
		return bytes.Equal(s[:], b[n:])
	default:
		s := sha256.Sum256(b[:n])
		return bytes.Equal(s[:], b[n:])
	}
}

// parse reads b, the index less its checksum.
func parse(b []byte, h Hash) (*Index, error) {
	if string(b[:4]) != "DIRC" {
		return nil, fmt.Errorf("signature %q, want \"DIRC\"", b[:4])
	}
	version := binary.BigEndian.Uint32(b[4:])
	if version < 2 || version > 4 {
		return nil, fmt.Errorf("version %d, want 2, 3 or 4", version)
	}
	count := binary.BigEndian.Uint32(b[8:])
	// An entry is at least its fixed part and a NUL (v4: a varint byte).
	fixed := statBytes + int(h) + 2
	if count > MaxEntries || uint64(count)*uint64(fixed+1) > uint64(len(b)-12) {
		return nil, fmt.Errorf("%d entries do not fit in %d bytes (at most %d entries)", count, len(b), MaxEntries)
	}
	ix := &Index{Version: int(version), Hash: h, Entries: make([]Entry, 0, count)}
	off := 12
	var prev []byte
	// A split index's own entries that replace shared ones have no path:
	// refused below, by its extension.
	empty := -1
	pathBytes := 0
	dir := -1 // a sparse directory entry: refused below, by its extension
	for i := range int(count) {
		e, n, err := entry(b[off:], ix.Version, h, prev)
		if err != nil {
			return nil, fmt.Errorf("entry %d at offset %d: %w", i, off, err)
		}
		if len(e.Path) == 0 && empty < 0 {
			empty = i
		}
		if e.Mode == modeDir && dir < 0 {
			dir = i
		}
		if i > 0 && empty < 0 {
			last := ix.Entries[i-1]
			if c := bytes.Compare(last.Path, e.Path); c > 0 || c == 0 && last.Stage >= e.Stage {
				return nil, fmt.Errorf("entry %d at offset %d (%q): out of order after %q", i, off, e.Path, last.Path)
			}
		}
		if pathBytes += len(e.Path); pathBytes > MaxPathBytes {
			return nil, fmt.Errorf("entry %d at offset %d: the paths hold more than %d bytes", i, off, MaxPathBytes)
		}
		ix.Entries = append(ix.Entries, e)
		prev = e.Path
		off += n
	}
	for off < len(b) {
		if len(b)-off < 8 {
			return nil, fmt.Errorf("%d bytes after the last extension at offset %d", len(b)-off, off)
		}
		sig := b[off : off+4]
		size := binary.BigEndian.Uint32(b[off+4:])
		if uint64(size) > uint64(len(b)-off-8) {
			return nil, fmt.Errorf("extension %q at offset %d: %d bytes, past the end", sig, off, size)
		}
		switch {
		case string(sig) == "link":
			return nil, fmt.Errorf("a split index (extension \"link\"): %w", ErrUnsupported)
		case string(sig) == "sdir":
			return nil, fmt.Errorf("a sparse index (extension \"sdir\"): %w", ErrUnsupported)
		case sig[0] < 'A' || sig[0] > 'Z':
			return nil, fmt.Errorf("extension %q at offset %d: required and unknown", sig, off)
		}
		off += 8 + int(size)
	}
	if empty >= 0 {
		return nil, fmt.Errorf("entry %d: empty path", empty)
	}
	if dir >= 0 {
		return nil, fmt.Errorf("entry %d: a directory (mode 040000) outside a sparse index", dir)
	}
	return ix, nil
}

// entry reads one entry at the start of b and returns it and its length.
func entry(b []byte, version int, h Hash, prev []byte) (Entry, int, error) {
	fixed := statBytes + int(h) + 2
	if len(b) < fixed {
		return Entry{}, 0, errors.New("truncated")
	}
	var e Entry
	e.Mode = binary.BigEndian.Uint32(b[24:])
	switch e.Mode {
	case ModeFile, ModeExec, ModeSymlink, ModeGitlink, modeDir:
	default:
		return e, 0, fmt.Errorf("mode %o", e.Mode)
	}
	e.OID = bytes.Clone(b[statBytes : statBytes+int(h)])
	flags := binary.BigEndian.Uint16(b[fixed-2:])
	e.AssumeValid = flags&flagAssumeValid != 0
	e.Stage = int(flags&flagStage) >> 12
	n := fixed
	if flags&flagExtended != 0 {
		if version < 3 {
			return e, 0, fmt.Errorf("extended flags in a version %d index", version)
		}
		if len(b) < n+2 {
			return e, 0, errors.New("truncated")
		}
		x := binary.BigEndian.Uint16(b[n:])
		if x&^(xflagSkipWorktree|xflagIntentToAdd) != 0 {
			return e, 0, fmt.Errorf("unknown extended flags %#04x", x)
		}
		e.SkipWorktree = x&xflagSkipWorktree != 0
		e.IntentToAdd = x&xflagIntentToAdd != 0
		n += 2
	}
	if version == 4 {
		strip, k, err := varint(b[n:])
		if err != nil {
			return e, 0, err
		}
		n += k
		if strip > uint64(len(prev)) {
			return e, 0, fmt.Errorf("removes %d bytes of the previous path, which has %d", strip, len(prev))
		}
		end := bytes.IndexByte(b[n:], 0)
		if end < 0 {
			return e, 0, errors.New("path without a NUL")
		}
		keep := prev[:len(prev)-int(strip)]
		e.Path = make([]byte, 0, len(keep)+end)
		e.Path = append(append(e.Path, keep...), b[n:n+end]...)
		n += end + 1
	} else {
		end := bytes.IndexByte(b[n:], 0)
		if end < 0 {
			return e, 0, errors.New("path without a NUL")
		}
		e.Path = bytes.Clone(b[n : n+end])
		// The fixed part and the path, padded with 1 to 8 NULs to a
		// multiple of 8.
		size := (n + end + 8) &^ 7
		if size > len(b) {
			return e, 0, errors.New("truncated padding")
		}
		for _, c := range b[n+end : size] {
			if c != 0 {
				return e, 0, errors.New("padding not NUL")
			}
		}
		n = size
	}
	if l := int(flags & flagNameMask); l != min(len(e.Path), flagNameMask) {
		return e, 0, fmt.Errorf("path %q of %d bytes, flags say %d", e.Path, len(e.Path), l)
	}
	return e, n, nil
}

// varint decodes git's offset encoding (varint.c): big-endian 7-bit
// groups, each continuation adding one, so every value has one spelling.
func varint(b []byte) (uint64, int, error) {
	var v uint64
	for i, c := range b {
		if i > 0 {
			v++
		}
		if v > 1<<56 {
			return 0, 0, errors.New("path prefix length overflows")
		}
		v = v<<7 | uint64(c&0x7f)
		if c&0x80 == 0 {
			return v, i + 1, nil
		}
	}
	return 0, 0, errors.New("truncated path prefix length")
}
