package layerseal

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/layerseal/layerseal/attest"
)

// changeList is the change list of a checkpoint that walked, as the next
// checkpoint that walks takes it over: the entries, sorted by path bytes,
// each with its leaf encoding and leaf hash, so that what did not change
// is neither encoded nor hashed again. Built by next, it also holds the
// difference from the list it was built from.
type changeList struct {
	entries []attest.Entry
	leaves  [][]byte // leaves[i] is entries[i].MarshalLeaf()
	hashes  [][]byte // hashes[i] is attest.HashLeaf(leaves[i])

	changed []attest.Entry // entries new or different since the list before
	removed []attest.Path  // paths of the list before that are gone
}

// next returns the list of the changes all (sorted by path bytes, as a
// walk gives them) and its difference from l, which may be nil. An entry
// that a walk took over from l (overlay.ReadChanged copies the entry, so
// it holds the same states) keeps its encoding and hash; any other entry
// at a path l lists is compared by leaf encoding. It costs one encoding
// and one hash per entry that was examined again, and a merge.
func (l *changeList) next(all []attest.Entry) *changeList {
	n := &changeList{entries: all, leaves: make([][]byte, len(all)), hashes: make([][]byte, len(all))}
	var prev []attest.Entry
	if l != nil {
		prev = l.entries
	}
	i := 0
	for j := range all {
		e := &all[j]
		for ; i < len(prev) && prev[i].Path < e.Path; i++ {
			n.removed = append(n.removed, prev[i].Path)
		}
		var leaf []byte
		if i < len(prev) && prev[i].Path == e.Path {
			p := &prev[i]
			i++
			taken := p.Change == e.Change && p.Old == e.Old && p.New == e.New
			if !taken {
				leaf = e.MarshalLeaf()
			}
			if taken || bytes.Equal(leaf, l.leaves[i-1]) {
				n.leaves[j], n.hashes[j] = l.leaves[i-1], l.hashes[i-1]
				continue
			}
		} else {
			leaf = e.MarshalLeaf()
		}
		n.leaves[j], n.hashes[j] = leaf, attest.HashLeaf(leaf)
		n.changed = append(n.changed, *e)
	}
	for ; i < len(prev); i++ {
		n.removed = append(n.removed, prev[i].Path)
	}
	return n
}

// root is the Merkle root of the list (attest.MerkleRoot of its entries).
func (l *changeList) root() []byte {
	r, err := attest.RootOfLeafHashes(len(l.hashes), func(i int) []byte { return l.hashes[i] })
	if err != nil {
		panic(err) // a range of hashes cannot refuse a hash
	}
	return r
}

// changesTag opens a changes file.
const changesTag = "layerseal/checkpoint-changes/v2\x00"

// The changes file holds, in the session's state dir (root's alone, out
// of the agent's view), the change list of the last checkpoint that
// walked, which the next one that walks takes over where the upper layer
// did not change. It is written and read back only by the supervisor,
// which keeps its SHA-256 in memory and checks it before use:
//
//	file  = "layerseal/checkpoint-changes/v2" 0x00
//	        uint64 seq                         ; the checkpoint's, big-endian
//	        uint64 n                           ; number of entries
//	        n × (uint32 len, leaf, leaf hash)  ; attest.Entry.MarshalLeaf, in order
const checkpointChangesFile = "checkpoint-changes"

// write replaces the changes file at path with l as the list of
// checkpoint seq and returns the file's SHA-256.
func (l *changeList) write(path string, seq uint64) ([]byte, error) {
	size := len(changesTag) + 16
	for _, leaf := range l.leaves {
		size += 4 + len(leaf) + 32
	}
	b := make([]byte, 0, size)
	b = append(b, changesTag...)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = binary.BigEndian.AppendUint64(b, uint64(len(l.leaves)))
	for i, leaf := range l.leaves {
		b = binary.BigEndian.AppendUint32(b, uint32(len(leaf)))
		b = append(b, leaf...)
		b = append(b, l.hashes[i]...)
	}
	// A fresh file, not a rename over the old one or a truncation of it,
	// which ext4 (auto_da_alloc) writes back at once. A file cut short
	// by a crash fails the digest check and is not used.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, err
	}
	return sha(b), nil
}

// errChanges is readChangeList's error for a file that is not the one
// written for the checkpoint asked for.
var errChanges = errors.New("not the changes of the last walked checkpoint")

// readChangeList reads back the changes file written for checkpoint seq,
// whose SHA-256 is sum: one leaf parse per entry.
func readChangeList(path string, seq uint64, sum []byte) (*changeList, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if s := sha256.Sum256(b); !bytes.Equal(s[:], sum) || len(b) < len(changesTag)+16 ||
		string(b[:len(changesTag)]) != changesTag || binary.BigEndian.Uint64(b[len(changesTag):]) != seq {
		return nil, fmt.Errorf("changes file %q: %w", path, errChanges)
	}
	n := binary.BigEndian.Uint64(b[len(changesTag)+8:])
	b = b[len(changesTag)+16:]
	if n > uint64(len(b))/36 {
		return nil, fmt.Errorf("changes file %q: %d entries in %d bytes: %w", path, n, len(b), errChanges)
	}
	l := &changeList{entries: make([]attest.Entry, n), leaves: make([][]byte, n), hashes: make([][]byte, n)}
	for i := range l.entries {
		if len(b) < 4 || uint64(len(b)-4) < uint64(binary.BigEndian.Uint32(b))+32 {
			return nil, fmt.Errorf("changes file %q: truncated: %w", path, errChanges)
		}
		k := 4 + binary.BigEndian.Uint32(b)
		e, err := attest.ParseLeaf(b[4:k])
		if err != nil {
			return nil, fmt.Errorf("changes file %q: %w", path, err)
		}
		l.entries[i], l.leaves[i], l.hashes[i], b = *e, b[4:k:k], b[k:k+32:k+32], b[k+32:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("changes file %q: %d trailing bytes: %w", path, len(b), errChanges)
	}
	return l, nil
}
