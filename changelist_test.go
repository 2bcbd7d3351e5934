package layerseal

import (
	"testing"

	"github.com/layerseal/layerseal/attest"
)

// TestChangeListNext: an entry holding the previous list's very states is
// taken with its leaf (not encoded again); an entry with states of its own
// is compared by leaf, so an equal one is not listed as changed and a
// different one is; paths gone are listed removed.
func TestChangeListNext(t *testing.T) {
	file := func(size uint64) *attest.State { return &attest.State{Type: attest.File, Mode: 0o644, Size: size} }
	first := (*changeList)(nil).next([]attest.Entry{
		{Path: "edited", Change: attest.Added, New: file(3)},
		{Path: "gone", Change: attest.Added, New: file(4)},
		{Path: "kept", Change: attest.Added, New: file(1)},
		{Path: "same", Change: attest.Added, New: file(2)},
	})
	// Entries come sorted by path bytes, as a walk gives them.
	if len(first.changed) != 4 || len(first.removed) != 0 {
		t.Fatalf("first list: %d changed, %d removed", len(first.changed), len(first.removed))
	}
	// taken holds the very states of the first list's entry, as
	// overlay.ReadChanged copies it; its states are trusted unchanged
	// without looking at them: a size changed behind the list's back is
	// not seen (overlay never shares a state it classified afresh,
	// TestReadChangedSharesStates).
	taken := first.entries[2]
	taken.New.Size = 100
	second := first.next([]attest.Entry{
		{Path: "edited", Change: attest.Added, New: file(30)},
		taken,
		{Path: "same", Change: attest.Added, New: file(2)},
	})
	if len(second.changed) != 1 || second.changed[0].Path != "edited" || len(second.removed) != 1 || second.removed[0] != "gone" {
		t.Errorf("second list: changed %v, removed %v; want edited, gone", second.changed, second.removed)
	}
	if &second.leaves[1][0] != &first.leaves[2][0] {
		t.Error("the taken entry was encoded again")
	}
	if &second.leaves[2][0] != &first.leaves[3][0] {
		t.Error("the equal entry does not keep the previous leaf")
	}
	if root, err := attest.MerkleRoot(second.entries); err != nil || string(root) == string(second.root()) {
		t.Errorf("the root took the changed size: %x (%v)", root, err)
	}
}
