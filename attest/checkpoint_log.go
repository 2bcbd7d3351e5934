package attest

import (
	"crypto/sha256"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
)

// The checkpoint log is small (one leaf per checkpoint), so its proofs are
// computed from the leaves themselves: each proof node is the root of a
// range of leaves.

func leafHash(b []byte) []byte { return rfc6962.DefaultHasher.HashLeaf(b) }

func sha(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}

// logRoot is the RFC 6962 root of leaf hashes: 2n hashes at most.
func logRoot(leaves [][]byte) []byte {
	r := rangeFactory.NewEmptyRange(0)
	for _, l := range leaves {
		if err := r.Append(l, nil); err != nil {
			panic(err) // a range of hashes cannot refuse a hash
		}
	}
	root, err := rootOf(r)
	if err != nil {
		panic(err)
	}
	return root
}

// rehash fills in proof nodes from the leaves.
func rehash(leaves [][]byte, nodes proof.Nodes) ([][]byte, error) {
	hashes := make([][]byte, len(nodes.IDs))
	for i, id := range nodes.IDs {
		begin, end := id.Coverage()
		hashes[i] = logRoot(leaves[begin:end])
	}
	return nodes.Rehash(hashes, rfc6962.DefaultHasher.HashChildren)
}

func inclusionProof(leaves [][]byte, index uint64) ([][]byte, error) {
	nodes, err := proof.Inclusion(index, uint64(len(leaves)))
	if err != nil {
		return nil, err
	}
	return rehash(leaves, nodes)
}

// ConsistencyProof returns the RFC 6962 proof that the log of the first m
// leaves is a prefix of the log of the first n (m ≤ n ≤ len(leaves)). A
// proof from 0 is empty.
func ConsistencyProof(leaves [][]byte, m, n uint64) ([][]byte, error) {
	if m == 0 {
		return [][]byte{}, nil
	}
	if n > uint64(len(leaves)) {
		return nil, malformed("consistency proof to size %d of a log of %d", n, len(leaves))
	}
	nodes, err := proof.Consistency(m, n)
	if err != nil {
		return nil, malformed("consistency proof: %v", err)
	}
	p, err := rehash(leaves[:n], nodes)
	if p == nil && err == nil {
		p = [][]byte{}
	}
	return p, err
}

// VerifyConsistency checks an RFC 6962 consistency proof that the log head
// (m, rootM) is a prefix of (n, rootN), at most ⌈log2 n⌉+1 hashes; any
// failure is ErrNotVerified. A proof from size 0 must be empty.
func VerifyConsistency(m, n uint64, p [][]byte, rootM, rootN []byte) error {
	if m == 0 {
		if len(p) != 0 {
			return ErrNotVerified
		}
		return nil
	}
	if err := proof.VerifyConsistency(rfc6962.DefaultHasher, m, n, p, rootM, rootN); err != nil {
		return ErrNotVerified
	}
	return nil
}

func verifyInclusion(leaf []byte, index, size uint64, p [][]byte, root []byte) error {
	if err := proof.VerifyInclusion(rfc6962.DefaultHasher, index, size, leaf, p, root); err != nil {
		return ErrNotVerified
	}
	return nil
}
