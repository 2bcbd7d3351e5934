package attest

import (
	"crypto/sha256"
	"fmt"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
)

var rangeFactory = compact.RangeFactory{Hash: rfc6962.DefaultHasher.HashChildren}

// checkEntries refuses invalid entries and entries not sorted by path bytes
// with unique paths.
func checkEntries(entries []Entry) error {
	for i := range entries {
		if err := entries[i].Valid(); err != nil {
			return err
		}
	}
	return checkOrder(entries)
}

// checkOrder refuses entries that are not sorted by path bytes with unique
// paths.
func checkOrder(entries []Entry) error {
	for i := 1; i < len(entries); i++ {
		if entries[i-1].Path >= entries[i].Path {
			if entries[i-1].Path == entries[i].Path {
				return fmt.Errorf("entries %d and %d: duplicate path %q", i-1, i, string(entries[i].Path))
			}
			return fmt.Errorf("entries %d and %d: paths %q and %q out of order", i-1, i, string(entries[i-1].Path), string(entries[i].Path))
		}
	}
	return nil
}

// MerkleRoot returns the RFC 6962 Merkle tree hash of the entries' leaf
// hashes (SHA-256 of the empty string when there are none). The entries must
// be valid (Entry.Valid) and sorted by path bytes with unique paths. It costs one leaf encoding and
// about 2n SHA-256 computations for n entries, and O(log n) memory.
func MerkleRoot(entries []Entry) ([]byte, error) {
	if err := checkEntries(entries); err != nil {
		return nil, fmt.Errorf("merkle root: %w", err)
	}
	return RootOfLeafHashes(len(entries), func(i int) []byte { return entries[i].LeafHash() })
}

func rootOf(r *compact.Range) ([]byte, error) {
	if r.End() == 0 {
		return rfc6962.DefaultHasher.EmptyRoot(), nil
	}
	root, err := r.GetRootHash(nil)
	if err != nil {
		return nil, fmt.Errorf("merkle root: %w", err)
	}
	return root, nil
}

// Tree is the Merkle tree over a statement's entries, kept in memory to
// answer inclusion proofs.
type Tree struct {
	size uint64
	// levels[l] holds the hashes of the perfect subtrees at level l, in
	// index order, 32 bytes each.
	levels [][]byte
	root   []byte
}

// NewTree builds the tree over entries, which must be valid and sorted by
// path bytes with unique paths. It costs what MerkleRoot does plus memory
// for about 2n hashes (64n bytes), in one allocation per level.
func NewTree(entries []Entry) (*Tree, error) {
	if err := checkEntries(entries); err != nil {
		return nil, fmt.Errorf("merkle tree: %w", err)
	}
	t := &Tree{size: uint64(len(entries))}
	for n := len(entries); n > 0; n >>= 1 {
		t.levels = append(t.levels, make([]byte, 0, n*sha256.Size))
	}
	visit := func(id compact.NodeID, hash []byte) {
		// Nodes of one level complete in index order.
		t.levels[id.Level] = append(t.levels[id.Level], hash...)
	}
	r := rangeFactory.NewEmptyRange(0)
	var buf []byte
	for i := range entries {
		buf = entries[i].appendLeaf(buf[:0])
		if err := r.Append(leafHash(buf), visit); err != nil {
			return nil, fmt.Errorf("merkle tree: %w", err)
		}
	}
	root, err := rootOf(r)
	if err != nil {
		return nil, err
	}
	t.root = root
	return t, nil
}

// Root returns the tree's root hash.
func (t *Tree) Root() []byte { return append([]byte(nil), t.root...) }

// Size returns the number of leaves.
func (t *Tree) Size() uint64 { return t.size }

// InclusionProof returns the RFC 6962 inclusion proof of the leaf at index:
// at most ⌈log2 n⌉ hashes, found by lookup plus at most as many hash
// computations.
func (t *Tree) InclusionProof(index uint64) ([][]byte, error) {
	nodes, err := proof.Inclusion(index, t.size)
	if err != nil {
		return nil, fmt.Errorf("inclusion proof: %w", err)
	}
	hashes := make([][]byte, len(nodes.IDs))
	for i, id := range nodes.IDs {
		if id.Level >= uint(len(t.levels)) || id.Index >= uint64(len(t.levels[id.Level])/sha256.Size) {
			return nil, fmt.Errorf("inclusion proof: node %d at level %d missing", id.Index, id.Level)
		}
		at := id.Index * sha256.Size
		hashes[i] = t.levels[id.Level][at : at+sha256.Size : at+sha256.Size]
	}
	p, err := nodes.Rehash(hashes, rfc6962.DefaultHasher.HashChildren)
	if err != nil {
		return nil, fmt.Errorf("inclusion proof: %w", err)
	}
	return p, nil
}

// VerifyInclusion checks that e is the leaf at index in the tree of size
// leaves with the given root, using an inclusion proof. It costs one leaf
// encoding and at most ⌈log2 size⌉+1 hashes, and returns ErrNotVerified on
// any mismatch, or an error wrapping ErrMalformed if e is not valid.
func VerifyInclusion(e *Entry, index, size uint64, inclusion [][]byte, root []byte) error {
	if err := e.Valid(); err != nil {
		return malformed("%v", err)
	}
	if err := proof.VerifyInclusion(rfc6962.DefaultHasher, index, size, e.LeafHash(), inclusion, root); err != nil {
		return ErrNotVerified
	}
	return nil
}

// HashLeaf returns the RFC 6962 leaf hash of a leaf encoding:
// e.LeafHash() is HashLeaf(e.MarshalLeaf()).
func HashLeaf(leaf []byte) []byte { return leafHash(leaf) }

// RootOfLeafHashes returns the RFC 6962 Merkle tree hash of n leaf hashes
// given in order by hash: MerkleRoot of entries is RootOfLeafHashes of
// their leaf hashes. It costs about n SHA-256 computations.
func RootOfLeafHashes(n int, hash func(i int) []byte) ([]byte, error) {
	r := rangeFactory.NewEmptyRange(0)
	for i := range n {
		if err := r.Append(hash(i), nil); err != nil {
			return nil, fmt.Errorf("merkle root: %w", err)
		}
	}
	return rootOf(r)
}
