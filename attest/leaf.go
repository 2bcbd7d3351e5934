package attest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/transparency-dev/merkle/rfc6962"
)

// LeafTag opens every leaf encoding; it names the format and its version.
const LeafTag = "layerseal/leaf/v1\x00"

// MarshalLeaf returns the leaf encoding of e, the bytes a statement's Merkle
// tree commits to. All integers are big-endian and unsigned unless noted; a
// "bytes" field is a uint32 length followed by that many bytes.
//
//	leaf   = "layerseal/leaf/v1" 0x00    ; LeafTag, 18 bytes
//	         bytes(path)                 ; raw path bytes
//	         bytes(change)               ; e.g. "modified"
//	         uint8 presence              ; bit 0: old present, bit 1: new present, others 0
//	         [state(old)] [state(new)]   ; in that order, each only when present
//	state  = bytes(type)                 ; e.g. "file"
//	         uint32 mode, uint32 uid, uint32 gid
//	         uint64 size
//	         int64 mtime_ns              ; two's complement
//	         uint8 has_sha256            ; 0 or 1
//	         [32 bytes sha256]           ; only when has_sha256 is 1
//	         bytes(target)
//	         uint64 rdev
//	         uint32 n_xattrs
//	         n_xattrs × (bytes(name) bytes(value))
//	         bytes(link)
//
// MarshalLeaf does not validate e; it panics if a field is longer than
// 2^32-1 bytes or a digest is neither absent nor 32 bytes, which a valid
// entry never is. A later format gets a new tag.
func (e *Entry) MarshalLeaf() []byte {
	return e.appendLeaf(make([]byte, 0, 128+len(e.Path)))
}

// appendLeaf appends e.MarshalLeaf() to b.
func (e *Entry) appendLeaf(b []byte) []byte {
	b = append(b, LeafTag...)
	b = appendBytes(b, string(e.Path))
	b = appendBytes(b, string(e.Change))
	var presence byte
	if e.Old != nil {
		presence |= 1
	}
	if e.New != nil {
		presence |= 2
	}
	b = append(b, presence)
	if e.Old != nil {
		b = e.Old.appendLeaf(b)
	}
	if e.New != nil {
		b = e.New.appendLeaf(b)
	}
	return b
}

// LeafHash returns the RFC 6962 leaf hash of e: SHA-256 of 0x00 followed by
// e.MarshalLeaf().
func (e *Entry) LeafHash() []byte {
	return rfc6962.DefaultHasher.HashLeaf(e.MarshalLeaf())
}

func appendBytes(b []byte, s string) []byte {
	if uint64(len(s)) > math.MaxUint32 {
		panic(fmt.Sprintf("attest: leaf field of %d bytes", len(s)))
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func (s *State) appendLeaf(b []byte) []byte {
	b = appendBytes(b, string(s.Type))
	b = binary.BigEndian.AppendUint32(b, s.Mode)
	b = binary.BigEndian.AppendUint32(b, s.UID)
	b = binary.BigEndian.AppendUint32(b, s.GID)
	b = binary.BigEndian.AppendUint64(b, s.Size)
	b = binary.BigEndian.AppendUint64(b, uint64(s.MtimeNS))
	switch len(s.SHA256) {
	case 0:
		if s.SHA256 != nil {
			panic("attest: empty non-nil digest in leaf")
		}
		b = append(b, 0)
	case 32:
		b = append(b, 1)
		b = append(b, s.SHA256...)
	default:
		panic(fmt.Sprintf("attest: digest of %d bytes in leaf", len(s.SHA256)))
	}
	b = appendBytes(b, string(s.Target))
	b = binary.BigEndian.AppendUint64(b, s.Rdev)
	if uint64(len(s.Xattrs)) > math.MaxUint32 {
		panic("attest: too many xattrs in leaf")
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.Xattrs)))
	for _, x := range s.Xattrs {
		b = appendBytes(b, x.Name)
		b = appendBytes(b, string(x.Value))
	}
	return appendBytes(b, string(s.Link))
}

var errLeafShort = errors.New("truncated")

// leafReader reads the fields of a leaf encoding.
type leafReader struct {
	b   []byte
	err error
}

func (r *leafReader) take(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if uint64(len(r.b)) < n {
		r.err = errLeafShort
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *leafReader) u8() byte {
	if v := r.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *leafReader) u32() uint32 {
	if v := r.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (r *leafReader) u64() uint64 {
	if v := r.take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (r *leafReader) bytes() string { return string(r.take(uint64(r.u32()))) }

func (r *leafReader) state() *State {
	s := &State{Type: Type(r.bytes())}
	s.Mode, s.UID, s.GID = r.u32(), r.u32(), r.u32()
	s.Size = r.u64()
	s.MtimeNS = int64(r.u64())
	switch r.u8() {
	case 0:
	case 1:
		s.SHA256 = append([]byte(nil), r.take(32)...)
	default:
		if r.err == nil {
			r.err = errors.New("digest flag not 0 or 1")
		}
	}
	s.Target = Path(r.bytes())
	s.Rdev = r.u64()
	n := r.u32()
	for i := uint32(0); i < n && r.err == nil; i++ {
		x := Xattr{Name: r.bytes()}
		if v := r.bytes(); v != "" {
			x.Value = []byte(v)
		}
		s.Xattrs = append(s.Xattrs, x)
	}
	s.Link = Path(r.bytes())
	return s
}

// ParseLeaf is the inverse of MarshalLeaf: it parses a leaf encoding,
// refusing truncated input, unknown presence or digest flags, and
// trailing bytes, so MarshalLeaf of the result is b again (an empty xattr
// value parses as nil). It does not validate the values: a caller that
// holds leaves it did not just make checks them, with Entry.Valid or by
// comparing MerkleRoot of the entries with a signed root.
func ParseLeaf(b []byte) (*Entry, error) {
	if len(b) < len(LeafTag) || string(b[:len(LeafTag)]) != LeafTag {
		return nil, fmt.Errorf("parse leaf: missing tag %q", LeafTag)
	}
	r := &leafReader{b: b[len(LeafTag):]}
	e := &Entry{Path: Path(r.bytes()), Change: Change(r.bytes())}
	presence := r.u8()
	if r.err == nil && presence&^3 != 0 {
		return nil, fmt.Errorf("parse leaf: presence flags %#x", presence)
	}
	if presence&1 != 0 {
		e.Old = r.state()
	}
	if presence&2 != 0 {
		e.New = r.state()
	}
	if r.err != nil {
		return nil, fmt.Errorf("parse leaf: %w", r.err)
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("parse leaf: %d trailing bytes", len(r.b))
	}
	return e, nil
}
