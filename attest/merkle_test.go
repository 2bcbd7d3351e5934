package attest

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"testing"
)

// refRoot is RFC 6962's MTH, written from the RFC's definition.
func refRoot(leaves [][]byte) []byte {
	switch len(leaves) {
	case 0:
		s := sha256.Sum256(nil)
		return s[:]
	case 1:
		s := sha256.Sum256(append([]byte{0}, leaves[0]...))
		return s[:]
	}
	k := 1
	for k*2 < len(leaves) {
		k *= 2
	}
	b := append([]byte{1}, refRoot(leaves[:k])...)
	s := sha256.Sum256(append(b, refRoot(leaves[k:])...))
	return s[:]
}

func entriesN(n int) []Entry {
	es := make([]Entry, n)
	for i := range es {
		es[i] = Entry{Path: Path(fmt.Sprintf("f%04d", i)), Change: Added, New: &State{Type: File, Size: uint64(i)}}
	}
	return es
}

func TestMerkleRoot(t *testing.T) {
	for n := range 40 {
		es := entriesN(n)
		var leaves [][]byte
		for i := range es {
			leaves = append(leaves, es[i].MarshalLeaf())
		}
		want := refRoot(leaves)
		got, err := MerkleRoot(es)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("MerkleRoot of %d = %x, want %x", n, got, want)
		}
		tree, err := NewTree(es)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(tree.Root(), want) || tree.Size() != uint64(n) {
			t.Fatalf("tree of %d: root %x size %d, want %x", n, tree.Root(), tree.Size(), want)
		}
		for i := range es {
			p, err := tree.InclusionProof(uint64(i))
			if err != nil {
				t.Fatalf("InclusionProof(%d) of %d: %v", i, n, err)
			}
			if err := VerifyInclusion(&es[i], uint64(i), uint64(n), p, want); err != nil {
				t.Fatalf("VerifyInclusion(%d) of %d: %v", i, n, err)
			}
			other := (i + 1) % n
			if other != i {
				if err := VerifyInclusion(&es[other], uint64(i), uint64(n), p, want); !errors.Is(err, ErrNotVerified) {
					t.Fatalf("VerifyInclusion of entry %d at index %d = %v, want ErrNotVerified", other, i, err)
				}
			}
			if len(p) > 0 {
				p[0] = bytes.Clone(p[0])
				p[0][0] ^= 1
				if err := VerifyInclusion(&es[i], uint64(i), uint64(n), p, want); !errors.Is(err, ErrNotVerified) {
					t.Fatalf("VerifyInclusion with a flipped proof = %v, want ErrNotVerified", err)
				}
			}
		}
		if _, err := tree.InclusionProof(uint64(n)); err == nil {
			t.Fatalf("InclusionProof(%d) of %d succeeded", n, n)
		}
	}
	empty := sha256.Sum256(nil)
	if got, _ := MerkleRoot(nil); !bytes.Equal(got, empty[:]) {
		t.Errorf("empty root = %x", got)
	}
}

func TestMerkleRootOrder(t *testing.T) {
	es := entriesN(3)
	es[1], es[2] = es[2], es[1]
	if _, err := MerkleRoot(es); err == nil {
		t.Error("MerkleRoot accepted unsorted entries")
	}
	es = entriesN(3)
	es[2].Path = es[1].Path
	if _, err := NewTree(es); err == nil {
		t.Error("NewTree accepted duplicate paths")
	}
	// Byte order, not rune or locale order.
	es = []Entry{{Path: "Z", Change: Added, New: &State{Type: Dir}}, {Path: "a", Change: Added, New: &State{Type: Dir}}, {Path: "\xff", Change: Added, New: &State{Type: Dir}}}
	if _, err := MerkleRoot(es); err != nil {
		t.Errorf("MerkleRoot of byte-sorted entries: %v", err)
	}
}
