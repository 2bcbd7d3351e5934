package attest

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
)

// BundleFormat is the format tag of a proof bundle.
const BundleFormat = "https://layerseal.dev/proof/v1"

// MaxBundleSize bounds a proof bundle file: room for a head of
// MaxHeadSize in base64 and for two entries with their xattrs.
const MaxBundleSize = 2*MaxHeadSize + 4<<20

// The kinds of proof bundle.
const (
	Inclusion = "inclusion" // the path changed: its entry is a leaf
	Absence   = "absence"   // the path did not change: no leaf has it
)

// A proof bundle shows one fact about one path of a statement's change set
// (its observed changes, or with applied the change set left after the
// sweep) to someone who holds only the session's public key: the path
// changed, and how (Inclusion); or it did not (Absence). It carries the
// statement's signed head (see Head) and, for each leaf it shows, the
// leaf's entry, its index and its RFC 6962 inclusion proof in the tree of
// the head's root and count.
//
// A bundle file is canonical JSON followed by one newline, an object with
// exactly these members, in this order:
//
//	format   "https://layerseal.dev/proof/v1"
//	kind     "inclusion" or "absence"
//	path     the path proven (Path text)
//	applied  bool: of the applied change set (applied_root and
//	         applied_count of the head) rather than the observed one
//	size     the tree's size, decimal string: the head's count, or its
//	         applied_count with applied
//	leaves   array of {"index": decimal string, "entry": an entry as in a
//	         statement's changes, "inclusion": array of lowercase hex
//	         hashes, the audit path from the leaf to the root}
//	head     the head's envelope file, base64 (standard, padded)
//
// An inclusion bundle has one leaf, whose entry's path is path. An absence
// bundle has the leaves adjacent to where path would sort (by path bytes):
// two at indices i and i+1 with the first's path before path and the
// second's after it; or one, at index 0 sorting after path or at index
// size−1 sorting before it; or none when size is 0. Adjacency, not only
// bracketing, is checked: with the signer sorting the leaves by path bytes
// (SignStatement refuses anything else), no leaf lies between them.
//
// What a bundle discloses: the head (session, launch digest, key, roots
// and counts, the reasons' codes and paths, the excluded subtrees), and
// the entries of its leaves: an inclusion bundle the proven path's full
// entry (old and new state, digests, xattrs); an absence bundle the full
// entries of its neighbours, paths the holder did not ask about. The audit
// paths are hashes and disclose no other path.
type Bundle struct {
	Kind    string
	Path    Path
	Applied bool
	Size    uint64
	Leaves  []ProofLeaf
	Head    []byte // the head's envelope file
}

// ProofLeaf is one leaf of a bundle: its entry, its index and its audit
// path.
type ProofLeaf struct {
	Index     uint64
	Entry     Entry
	Inclusion [][]byte
}

type bundleJSON struct {
	Format  string          `json:"format"`
	Kind    string          `json:"kind"`
	Path    Path            `json:"path"`
	Applied bool            `json:"applied"`
	Size    uint64          `json:"size,string"`
	Leaves  []proofLeafJSON `json:"leaves"`
	Head    []byte          `json:"head"`
}

type proofLeafJSON struct {
	Index     uint64    `json:"index,string"`
	Entry     entryJSON `json:"entry"`
	Inclusion []string  `json:"inclusion"`
}

// Marshal returns the bundle file bytes of b.
func (b *Bundle) Marshal() ([]byte, error) {
	j := &bundleJSON{Format: BundleFormat, Kind: b.Kind, Path: b.Path, Applied: b.Applied, Size: b.Size,
		Leaves: make([]proofLeafJSON, len(b.Leaves)), Head: b.Head}
	for i, l := range b.Leaves {
		e := &l.Entry
		j.Leaves[i] = proofLeafJSON{Index: l.Index, Inclusion: hexList(l.Inclusion),
			Entry: entryJSON{Path: e.Path, Change: e.Change, Old: stateToJSON(e.Old), New: stateToJSON(e.New)}}
		if j.Leaves[i].Inclusion == nil {
			j.Leaves[i].Inclusion = []string{}
		}
	}
	out, err := canonicalJSON(j)
	if err != nil {
		return nil, fmt.Errorf("encode bundle: %w", err)
	}
	return append(out, '\n'), nil
}

// ParseBundle strictly parses a bundle file: its size, its one valid
// encoding (no unknown, duplicate or case-variant members, no trailing
// data), its format tag and every value. It checks no signature or proof
// (VerifyBundle does). Its errors wrap ErrMalformed.
func ParseBundle(file []byte) (*Bundle, error) {
	if len(file) > MaxBundleSize {
		return nil, malformed("bundle of %d bytes is over the limit of %d", len(file), MaxBundleSize)
	}
	var j bundleJSON
	if err := strictJSON(file, &j, "bundle"); err != nil {
		return nil, err
	}
	if j.Format != BundleFormat {
		return nil, malformed("unsupported format %q", j.Format)
	}
	if err := canonicalCheck(file, &j, true, "bundle"); err != nil {
		return nil, err
	}
	b := &Bundle{Kind: j.Kind, Path: j.Path, Applied: j.Applied, Size: j.Size, Head: j.Head}
	if b.Kind != Inclusion && b.Kind != Absence {
		return nil, malformed("bundle: unknown kind %q", b.Kind)
	}
	if err := b.Path.Valid(); err != nil {
		return nil, malformed("bundle: %v", err)
	}
	for _, l := range j.Leaves {
		pl := ProofLeaf{Index: l.Index, Entry: Entry{Path: l.Entry.Path, Change: l.Entry.Change}}
		var err error
		if pl.Entry.Old, err = stateFromJSON(l.Entry.Old); err == nil {
			pl.Entry.New, err = stateFromJSON(l.Entry.New)
		}
		if err == nil {
			err = pl.Entry.Valid()
		}
		if err != nil {
			return nil, malformed("bundle: leaf %d: %v", l.Index, err)
		}
		for _, h := range l.Inclusion {
			d, err := parseHex("inclusion hash", h)
			if err != nil {
				return nil, malformed("bundle: leaf %d: %v", l.Index, err)
			}
			pl.Inclusion = append(pl.Inclusion, d)
		}
		b.Leaves = append(b.Leaves, pl)
	}
	return b, nil
}

// Proven is what a bundle that verified shows.
type Proven struct {
	Kind    string
	Path    Path
	Applied bool
	// Entry is the path's change, for an inclusion bundle.
	Entry *Entry
	// Neighbours are the leaves next to where the path would sort, for an
	// absence bundle (none when the change set is empty).
	Neighbours []Entry
	// Head is the statement's signed head the proof holds for.
	Head *Head
	// Covering are the head's reasons that cover the path: with any, the
	// statement did not look everywhere the path's answer depends on, so
	// an absence does not mean the path is untouched.
	Covering []Reason
	// Excluded is the head's excluded subtree holding the path, or one
	// under it: changes there are summarized, not leaves. Empty when none.
	Excluded Path
}

// Holds reports whether the proof holds with nothing to qualify it: no
// covering reason and no excluded subtree.
func (p *Proven) Holds() bool { return len(p.Covering) == 0 && p.Excluded == "" }

// VerifyBundle verifies a bundle file with pub: it parses it strictly
// (ParseBundle), verifies its head (VerifyHead), which must be a
// statement's, and checks every leaf's inclusion proof in the tree of the
// head's root and size, that the bundle's size is that size, and the
// bundle's claim: for inclusion, that the leaf's path is the path; for
// absence, that the leaves are adjacent and bracket the path.
//
// It returns ErrNotVerified when a signature or a proof fails or the
// bundle's claim does not follow from its leaves, an error wrapping
// ErrMalformed for input it refuses, and otherwise what was proven. When
// the proof holds for a head that is incomplete in a way that covers the
// path (a reason on the path, an ancestor or a descendant, or one that
// covers the whole walk: no path, a budget, no mount IDs) or the path is
// in an excluded subtree, it returns that with an error wrapping
// ErrIncomplete. It costs O(log size) hashes per leaf and the head's
// signature check.
func VerifyBundle(file []byte, pub PublicKey) (*Proven, error) {
	b, err := ParseBundle(file)
	if err != nil {
		return nil, err
	}
	h, err := VerifyHead(b.Head, pub)
	if err != nil {
		if errors.Is(err, ErrMalformed) {
			return nil, fmt.Errorf("bundle's head: %w", err)
		}
		return nil, err
	}
	if h.Kind != HeadKindStatement {
		return nil, malformed("bundle's head is the head of a %s, not of a statement", h.Kind)
	}
	root, size := h.Root, h.Count
	if b.Applied {
		root, size = h.AppliedRoot, h.AppliedCount
	}
	if b.Size != size {
		return nil, ErrNotVerified
	}
	for i := range b.Leaves {
		l := &b.Leaves[i]
		if err := VerifyInclusion(&l.Entry, l.Index, size, l.Inclusion, root); err != nil {
			return nil, err
		}
	}
	p := &Proven{Kind: b.Kind, Path: b.Path, Applied: b.Applied, Head: h}
	if err := b.claim(p); err != nil {
		return nil, err
	}
	p.Covering, p.Excluded = h.Covers(b.Path)
	if !p.Holds() {
		return p, fmt.Errorf("%w: the statement did not examine everything at or around %q", ErrIncomplete, b.Path.String())
	}
	return p, nil
}

// claim checks that b's verified leaves show its claim, and records it in p.
func (b *Bundle) claim(p *Proven) error {
	ls := b.Leaves
	if b.Kind == Inclusion {
		if len(ls) != 1 {
			return malformed("inclusion bundle with %d leaves, want 1", len(ls))
		}
		if ls[0].Entry.Path != b.Path {
			return ErrNotVerified
		}
		e := ls[0].Entry
		p.Entry = &e
		return nil
	}
	before := func(l ProofLeaf) bool { return l.Entry.Path < b.Path }
	after := func(l ProofLeaf) bool { return l.Entry.Path > b.Path }
	ok := false
	switch len(ls) {
	case 0:
		ok = b.Size == 0
	case 1:
		ok = ls[0].Index == 0 && after(ls[0]) || ls[0].Index == b.Size-1 && before(ls[0])
	case 2:
		ok = ls[1].Index == ls[0].Index+1 && before(ls[0]) && after(ls[1])
	default:
		return malformed("absence bundle with %d leaves, want at most 2", len(ls))
	}
	if !ok {
		return ErrNotVerified
	}
	for _, l := range ls {
		p.Neighbours = append(p.Neighbours, l.Entry)
	}
	return nil
}

// Covers returns the reasons of h that cover path p: those on p, an
// ancestor or a descendant of it, and those that cover the whole walk
// (no path, no mount IDs, a budget or limit that cut the walk short);
// and the excluded subtree that holds p or lies under it ("" when none).
// With either, the head's change set does not settle what happened at p.
func (h *Head) Covers(p Path) (reasons []Reason, excluded Path) {
	for _, r := range h.Incomplete {
		if r.Path == "" || r.Code == NoMountID || r.Code.Cut() || related(p, r.Path) {
			reasons = append(reasons, r)
		}
	}
	for _, x := range h.Excluded {
		if related(p, x) {
			return reasons, x
		}
	}
	return reasons, ""
}

// related reports whether a and b are the same path or one holds the other.
func related(a, b Path) bool {
	return a == Root || b == Root || Within(a, b) || Within(b, a)
}

// Prover makes proof bundles of one statement against its signed head.
type Prover struct {
	st      *Statement
	head    []byte
	trees   [2]*Tree // observed, applied; built when first asked for
	entries [2][]Entry
}

// NewProver returns a Prover of st, a statement that verified, whose
// signed head's envelope file is headEnv: it must be the head of st
// (HeadOf), or NewProver fails.
func NewProver(st *Statement, headEnv []byte) (*Prover, error) {
	h, err := ReadHead(headEnv)
	if err != nil {
		return nil, fmt.Errorf("read the head: %w", err)
	}
	if !h.Equal(HeadOf(st)) {
		return nil, errors.New("the head is not the head of this statement")
	}
	return &Prover{st: st, head: bytes.Clone(headEnv), entries: [2][]Entry{st.Entries, st.AppliedEntries()}}, nil
}

// Prove returns the bundle file of path: an inclusion bundle when path
// is in the change set (with applied, the applied change set), else an
// absence bundle. The first proof of each change set builds its tree
// (NewTree); then each costs O(log n).
func (pr *Prover) Prove(path Path, applied bool) ([]byte, error) {
	if err := path.Valid(); err != nil {
		return nil, fmt.Errorf("prove: %w", err)
	}
	k := 0
	if applied {
		k = 1
	}
	es := pr.entries[k]
	if pr.trees[k] == nil {
		t, err := NewTree(es)
		if err != nil {
			return nil, fmt.Errorf("prove: %w", err)
		}
		pr.trees[k] = t
	}
	t := pr.trees[k]
	b := &Bundle{Kind: Absence, Path: path, Applied: applied, Size: t.Size(), Head: pr.head}
	i := sort.Search(len(es), func(i int) bool { return es[i].Path >= path })
	var idx []int
	switch {
	case i < len(es) && es[i].Path == path:
		b.Kind, idx = Inclusion, []int{i}
	case i > 0 && i < len(es):
		idx = []int{i - 1, i}
	case i > 0:
		idx = []int{i - 1}
	case i < len(es):
		idx = []int{i}
	}
	for _, j := range idx {
		proof, err := t.InclusionProof(uint64(j))
		if err != nil {
			return nil, fmt.Errorf("prove: %w", err)
		}
		b.Leaves = append(b.Leaves, ProofLeaf{Index: uint64(j), Entry: es[j], Inclusion: proof})
	}
	out, err := b.Marshal()
	if err == nil && len(out) > MaxBundleSize {
		return nil, fmt.Errorf("prove %q: a bundle of %d bytes is larger than the %d a verifier reads", path.String(), len(out), MaxBundleSize)
	}
	return out, err
}

// Prove returns the bundle file of path in st (see Prover.Prove).
func Prove(st *Statement, headEnv []byte, path Path, applied bool) ([]byte, error) {
	pr, err := NewProver(st, headEnv)
	if err != nil {
		return nil, err
	}
	return pr.Prove(path, applied)
}
