package layerseal

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/layerseal/layerseal/attest"
)

// Bounds on reading the agent's pack files.
const (
	// agentMaxIndex is the largest pack index read into memory.
	agentMaxIndex = 512 << 20
	// agentMaxPacked is the largest object (or delta) read from a pack,
	// held in memory to resolve deltas against it.
	agentMaxPacked = 128 << 20
	// agentMaxDepth is the longest chain of deltas followed.
	agentMaxDepth = 1000
	// agentMaxInflate is the most bytes reading pack entries and
	// resolving deltas may produce in all: a short pack can ask for a lot
	// of copying.
	agentMaxInflate = 8 << 30
)

// errPack is wrapped by the refusals of a pack file that is malformed.
var errPack = errors.New("a malformed pack")

// agentPack is a pack file the agent's git wrote (git gc, or a commit that
// packed) with its version 2 index, both checked whole against the
// statement's digests when opened. Objects are read at the offsets the
// index gives; a delta's base is found in the same pack only (an offset
// before the delta's, or an id in the index), so a chain cannot reach
// outside the session's objects.
type agentPack struct {
	name    string
	f       *os.File
	size    int64
	hashLen int
	fanout  [256]uint32
	ids     []byte   // sorted, hashLen bytes each
	offsets []uint64 // the offset of each id's entry
}

// openPacks opens the pack files of the change set: every
// .git/objects/pack/*.pack the agent added, with its .idx.
func (r *agentRepo) openPacks() ([]*agentPack, error) {
	if r.opened {
		return r.packs, r.packsErr
	}
	r.opened = true
	var names []string
	for p, e := range r.changed {
		if e.New != nil && parentPath(p) == ".git/objects/pack" && strings.HasSuffix(string(p), ".pack") {
			names = append(names, strings.TrimSuffix(string(p), ".pack"))
		}
	}
	slices.Sort(names)
	for _, n := range names {
		pk, err := r.openPack(n)
		if err != nil {
			r.packsErr = err
			return nil, err
		}
		r.packs = append(r.packs, pk)
	}
	return r.packs, nil
}

func (r *agentRepo) closePacks() {
	for _, pk := range r.packs {
		pk.f.Close()
	}
	r.packs = nil
}

// openPack opens the pack name (without .pack) and reads its index.
func (r *agentRepo) openPack(name string) (*agentPack, error) {
	hashLen := r.hexLen / 2
	idx, err := r.read(attest.Path(name+".idx"), agentMaxIndex)
	if err != nil {
		return nil, err
	}
	if idx == nil {
		return nil, fmt.Errorf("the agent's %q has no index: %w", name+".pack", errPack)
	}
	pk := &agentPack{name: name + ".pack", hashLen: hashLen}
	bad := func(why string) error { return fmt.Errorf("the agent's %q: %s: %w", name+".idx", why, errPack) }
	if len(idx) < 8+1024+2*hashLen || !bytes.Equal(idx[:8], []byte{0xff, 't', 'O', 'c', 0, 0, 0, 2}) {
		return nil, bad("not a version 2 index")
	}
	sum := r.newHash()
	sum.Write(idx[:len(idx)-hashLen])
	if !bytes.Equal(sum.Sum(nil), idx[len(idx)-hashLen:]) {
		return nil, bad("its checksum does not match")
	}
	prev := uint32(0)
	for i := range pk.fanout {
		pk.fanout[i] = binary.BigEndian.Uint32(idx[8+4*i:])
		if pk.fanout[i] < prev {
			return nil, bad("its fan-out table is not sorted")
		}
		prev = pk.fanout[i]
	}
	n := uint64(pk.fanout[255])
	base := 8 + 1024 + n*uint64(hashLen+8)
	if uint64(len(idx)) < base+uint64(2*hashLen) || (uint64(len(idx))-base-uint64(2*hashLen))%8 != 0 {
		return nil, bad("its size does not match its count")
	}
	pk.ids = idx[8+1024 : 8+1024+n*uint64(hashLen)]
	for i := uint64(1); i < n; i++ {
		if bytes.Compare(pk.ids[(i-1)*uint64(hashLen):i*uint64(hashLen)], pk.ids[i*uint64(hashLen):(i+1)*uint64(hashLen)]) >= 0 {
			return nil, bad("its ids are not sorted")
		}
	}
	offs := idx[8+1024+n*uint64(hashLen+4) : base]
	large := idx[base : uint64(len(idx))-uint64(2*hashLen)]
	pk.offsets = make([]uint64, n)
	for i := range pk.offsets {
		o := binary.BigEndian.Uint32(offs[4*i:])
		if o&0x80000000 == 0 {
			pk.offsets[i] = uint64(o)
			continue
		}
		k := uint64(o &^ 0x80000000)
		if k >= uint64(len(large)/8) {
			return nil, bad("an offset beyond its table")
		}
		pk.offsets[i] = binary.BigEndian.Uint64(large[8*k:])
	}

	// The pack, checked whole against the statement's digest once, then
	// read at offsets.
	f, want, size, err := r.open(attest.Path(name + ".pack"))
	if err != nil {
		return nil, err
	}
	if f == nil || want == nil {
		f.Close()
		return nil, fmt.Errorf("the agent's %q is not a file of the change set: %w", name+".pack", errPack)
	}
	h := sha256.New()
	if got, err := io.Copy(h, io.LimitReader(f, int64(size)+1)); err != nil || uint64(got) != size || !bytes.Equal(h.Sum(nil), want) {
		f.Close()
		return nil, fmt.Errorf("the agent's %q does not hold what the statement lists", name+".pack")
	}
	pk.f, pk.size = f, int64(size)
	var hdr [12]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil || string(hdr[:4]) != "PACK" || binary.BigEndian.Uint32(hdr[8:]) != uint32(n) {
		f.Close()
		return nil, fmt.Errorf("the agent's %q: not a pack of its index's %d objects: %w", pk.name, n, errPack)
	}
	if v := binary.BigEndian.Uint32(hdr[4:]); v != 2 && v != 3 {
		f.Close()
		return nil, fmt.Errorf("the agent's %q: pack version %d: %w", pk.name, v, errPack)
	}
	for _, o := range pk.offsets {
		if o < 12 || int64(o) >= pk.size-int64(hashLen) {
			f.Close()
			return nil, fmt.Errorf("the agent's %q: an offset outside the pack: %w", pk.name, errPack)
		}
	}
	return pk, nil
}

// find returns the offset of the entry of the raw id, if the pack has it.
func (pk *agentPack) find(id []byte) (uint64, bool) {
	lo, hi := uint32(0), pk.fanout[id[0]]
	if id[0] > 0 {
		lo = pk.fanout[id[0]-1]
	}
	for lo < hi {
		m := lo + (hi-lo)/2
		switch c := bytes.Compare(pk.ids[uint64(m)*uint64(pk.hashLen):uint64(m+1)*uint64(pk.hashLen)], id); {
		case c == 0:
			return pk.offsets[m], true
		case c < 0:
			lo = m + 1
		default:
			hi = m
		}
	}
	return 0, false
}

// Pack entry types.
const (
	packCommit   = 1
	packTree     = 2
	packBlob     = 3
	packTag      = 4
	packOfsDelta = 6
	packRefDelta = 7
)

var packTypeNames = map[int]string{packCommit: "commit", packTree: "tree", packBlob: "blob", packTag: "tag"}

// entry reads the entry at off: its type (with deltas resolved) and body.
// depth counts the deltas followed to reach it.
func (r *agentRepo) entry(pk *agentPack, off uint64, depth int) (int, []byte, error) {
	if depth > agentMaxDepth {
		return 0, nil, fmt.Errorf("the agent's %q: a chain of more than %d deltas (or a cycle): %w", pk.name, agentMaxDepth, errPack)
	}
	br := bufio.NewReader(io.NewSectionReader(pk.f, int64(off), pk.size-int64(pk.hashLen)-int64(off)))
	c, err := br.ReadByte()
	if err != nil {
		return 0, nil, fmt.Errorf("the agent's %q at %d: %w", pk.name, off, errPack)
	}
	typ, size, shift := int(c>>4&7), uint64(c&0x0f), 4
	for c&0x80 != 0 {
		if c, err = br.ReadByte(); err != nil || shift > 60 {
			return 0, nil, fmt.Errorf("the agent's %q at %d: %w", pk.name, off, errPack)
		}
		size |= uint64(c&0x7f) << shift
		shift += 7
	}
	if size > agentMaxPacked {
		return 0, nil, fmt.Errorf("the agent's %q at %d: an object over %d bytes", pk.name, off, agentMaxPacked)
	}
	if r.inflated += size; r.inflated > agentMaxInflate {
		return 0, nil, fmt.Errorf("reading the agent's pack files makes more than %d bytes", uint64(agentMaxInflate))
	}
	var baseType int
	var base []byte
	switch typ {
	case packCommit, packTree, packBlob, packTag:
	case packOfsDelta:
		c, err := br.ReadByte()
		back := uint64(c & 0x7f)
		for err == nil && c&0x80 != 0 && back < 1<<56 {
			if c, err = br.ReadByte(); err == nil {
				back = (back+1)<<7 | uint64(c&0x7f)
			}
		}
		if err != nil || back == 0 || back > off {
			return 0, nil, fmt.Errorf("the agent's %q at %d: a bad delta base: %w", pk.name, off, errPack)
		}
		if baseType, base, err = r.entry(pk, off-back, depth+1); err != nil {
			return 0, nil, err
		}
	case packRefDelta:
		id := make([]byte, pk.hashLen)
		if _, err := io.ReadFull(br, id); err != nil {
			return 0, nil, fmt.Errorf("the agent's %q at %d: %w", pk.name, off, errPack)
		}
		boff, ok := pk.find(id)
		if !ok {
			return 0, nil, fmt.Errorf("the agent's %q at %d: a delta on %s, which the pack does not hold: %w", pk.name, off, hex.EncodeToString(id), errPack)
		}
		if baseType, base, err = r.entry(pk, boff, depth+1); err != nil {
			return 0, nil, err
		}
	default:
		return 0, nil, fmt.Errorf("the agent's %q at %d: an entry of type %d: %w", pk.name, off, typ, errPack)
	}
	zr, err := zlib.NewReader(br)
	if err != nil {
		return 0, nil, fmt.Errorf("the agent's %q at %d: %w: %w", pk.name, off, err, errPack)
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(zr, data); err != nil {
		return 0, nil, fmt.Errorf("the agent's %q at %d: its data is not %d bytes: %w", pk.name, off, size, errPack)
	}
	if base == nil && typ != packOfsDelta && typ != packRefDelta {
		return typ, data, nil
	}
	out, err := r.applyDelta(base, data)
	if err != nil {
		return 0, nil, fmt.Errorf("the agent's %q at %d: %w", pk.name, off, err)
	}
	return baseType, out, nil
}

// applyDelta applies a git delta to base: source and result sizes, then
// copy (from base) and insert instructions, each checked to stay in
// bounds.
func (r *agentRepo) applyDelta(base, delta []byte) ([]byte, error) {
	varint := func() (uint64, bool) {
		var v uint64
		for shift := 0; shift < 64; shift += 7 {
			if len(delta) == 0 {
				return 0, false
			}
			c := delta[0]
			delta = delta[1:]
			v |= uint64(c&0x7f) << shift
			if c&0x80 == 0 {
				return v, true
			}
		}
		return 0, false
	}
	src, ok1 := varint()
	dst, ok2 := varint()
	if !ok1 || !ok2 || src != uint64(len(base)) || dst > agentMaxPacked {
		return nil, fmt.Errorf("a delta that does not fit its base: %w", errPack)
	}
	if r.inflated += dst; r.inflated > agentMaxInflate {
		return nil, fmt.Errorf("reading the agent's pack files makes more than %d bytes", uint64(agentMaxInflate))
	}
	out := make([]byte, 0, dst)
	for len(delta) > 0 {
		op := delta[0]
		delta = delta[1:]
		switch {
		case op&0x80 != 0:
			var off, n uint64
			for i := range 4 {
				if op&(1<<i) != 0 {
					if len(delta) == 0 {
						return nil, fmt.Errorf("a truncated delta: %w", errPack)
					}
					off |= uint64(delta[0]) << (8 * i)
					delta = delta[1:]
				}
			}
			for i := range 3 {
				if op&(0x10<<i) != 0 {
					if len(delta) == 0 {
						return nil, fmt.Errorf("a truncated delta: %w", errPack)
					}
					n |= uint64(delta[0]) << (8 * i)
					delta = delta[1:]
				}
			}
			if n == 0 {
				n = 0x10000
			}
			if off+n > uint64(len(base)) || uint64(len(out))+n > dst {
				return nil, fmt.Errorf("a delta that copies out of bounds: %w", errPack)
			}
			out = append(out, base[off:off+n]...)
		case op != 0:
			if int(op) > len(delta) || uint64(len(out))+uint64(op) > dst {
				return nil, fmt.Errorf("a delta that inserts out of bounds: %w", errPack)
			}
			out = append(out, delta[:op]...)
			delta = delta[op:]
		default:
			return nil, fmt.Errorf("a delta with a reserved instruction: %w", errPack)
		}
	}
	if uint64(len(out)) != dst {
		return nil, fmt.Errorf("a delta whose result is not its size: %w", errPack)
	}
	return out, nil
}

// packedObject reads object id of type typ from the agent's pack files,
// checks it hashes to id, writes it to w as a pack entry and returns its
// body (nil for a blob).
func (r *agentRepo) packedObject(id, typ string, w io.Writer) ([]byte, error) {
	packs, err := r.openPacks()
	if err != nil {
		return nil, err
	}
	raw, err := hex.DecodeString(id)
	if err != nil {
		return nil, err
	}
	for _, pk := range packs {
		off, ok := pk.find(raw)
		if !ok {
			continue
		}
		t, body, err := r.entry(pk, off, 0)
		if err != nil {
			return nil, err
		}
		if packTypeNames[t] != typ {
			return nil, fmt.Errorf("the agent's object %s is not a %s", id, typ)
		}
		h := r.newHash()
		h.Write([]byte(typ + " " + strconv.Itoa(len(body)) + "\x00"))
		h.Write(body)
		if hex.EncodeToString(h.Sum(nil)) != id {
			return nil, fmt.Errorf("the agent's object %s does not hash to its id (corrupt)", id)
		}
		if err := entryHeader(w, typ, uint64(len(body))); err != nil {
			return nil, err
		}
		zw := zlib.NewWriter(w)
		if _, err := zw.Write(body); err != nil {
			return nil, err
		}
		if err := zw.Close(); err != nil {
			return nil, err
		}
		if typ == "blob" {
			return nil, nil
		}
		return body, nil
	}
	return nil, fmt.Errorf("the agent's %s %s is in neither the session's objects nor the workspace's repository", typ, id)
}
