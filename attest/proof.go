package attest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"path/filepath"
	"slices"
	"sort"

	"github.com/go-json-experiment/json"
)

// BundleFormat is the format tag of a proof bundle.
const BundleFormat = "https://layerseal.dev/proof/v2"

// MaxBundleSize bounds a proof bundle file: room for a head of
// MaxHeadSize in base64 and for the entries of a subtree's changes with
// their xattrs.
const MaxBundleSize = 2*MaxHeadSize + 4<<20

// The kinds of proof bundle.
const (
	Inclusion = "inclusion" // the path changed: its entry is a leaf
	Absence   = "absence"   // the path did not change: no leaf has it
	Subtree   = "subtree"   // what changed at or under the path: those leaves, and no others
)

// A proof bundle shows one fact about one path of a statement's change set
// (its observed changes, or with applied the change set left after the
// sweep) to someone who holds only the session's public key: the path
// changed, and how (Inclusion); it did not (Absence); or exactly what
// changed at or under it, possibly nothing (Subtree). It carries the
// statement's signed head (see Head) and, for each leaf it shows, the
// leaf's entry, its index and its RFC 6962 inclusion proof in the tree of
// the head's root and count.
//
// A bundle file is canonical JSON followed by one newline, an object with
// exactly these members, in this order:
//
//	format   "https://layerseal.dev/proof/v2"
//	kind     "inclusion", "absence" or "subtree"
//	path     the path proven (Path text)
//	applied  bool: of the applied change set (applied_root and
//	         applied_count of the head) rather than the observed one
//	size     the tree's size, decimal string: the head's count, or its
//	         applied_count with applied
//	leaves   array of {"index": decimal string, "entry": an entry as in a
//	         statement's changes, "inclusion": the audit path's 32-byte
//	         hashes one after the other, base64 (standard, padded)},
//	         indices strictly increasing
//	head     the head's envelope file, base64 (standard, padded)
//
// The inclusion member of the first leaf is its whole audit path, from the
// leaf up to the root. Leaves that share the upper part of their audit
// paths do not repeat it: the inclusion member of every later leaf is its
// audit path without the longest run of last hashes that equals the last
// hashes of the previous leaf's (whole) audit path, and a verifier
// completes it with as many last hashes of that path as an audit path of
// its index in a tree of size leaves has hashes more (RFC 6962 fixes that
// length: with inner the bit length of index XOR (size−1), inner plus the
// number of one bits of index shifted right by inner). A run that is not
// the longest is another spelling and refused. Two adjacent leaves then
// cost one audit path and about two hashes.
//
// What the leaves show, for a path P (leaves sort by path bytes, and the
// signer refuses anything else, so a leaf's index is its rank):
//
//   - inclusion: one leaf, whose path is P;
//   - absence: no leaf has P: the two leaves at indices i and i+1 with the
//     first's path before P and the second's after it; or one, at index 0
//     sorting after P or at index size−1 sorting before it; or none when
//     size is 0;
//   - subtree: for each of two ranges of paths, P itself and the paths
//     that begin with P + "/" (all paths for "."), every leaf in the range,
//     at contiguous indices, and the leaf just before the range's first
//     index and the one just after its last (bracketing the range where
//     it would be when empty), unless the range reaches the tree's end;
//     P's own leaf alone when P changed. Nothing else.
//
// Adjacency of indices, not only the order of paths, is what is checked:
// no leaf lies between two shown at consecutive indices.
//
// What a bundle discloses: the head (session, launch digest, key, roots
// and counts, the reasons' codes and paths, the excluded subtrees), and
// the entries of its leaves: an inclusion bundle the proven path's full
// entry (old and new state, digests, xattrs); an absence bundle the full
// entries of its neighbours, paths the holder did not ask about; a
// subtree bundle every change at or under P and the neighbours of the two
// ranges. The audit paths are hashes and disclose no other path.
type Bundle struct {
	Kind    string
	Path    Path
	Applied bool
	Size    uint64
	Leaves  []ProofLeaf // sorted by index, each with its whole audit path
	Head    []byte      // the head's envelope file
}

// ProofLeaf is one leaf of a bundle: its entry, its index and its whole
// audit path.
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
	Inclusion []byte    `json:"inclusion"`
}

// formatFirst returns, for a file that did not decode with err, that its
// format tag is not want when it has another one: a file of another
// version is refused for that, not for what differs in it.
func formatFirst(file []byte, want string, err error) error {
	var f struct {
		Format string `json:"format"`
	}
	if json.Unmarshal(file, &f) == nil && f.Format != want {
		return malformed("unsupported format %q (this version reads %q)", f.Format, want)
	}
	return err
}

// auditLen is the number of hashes in the RFC 6962 audit path of the leaf
// at index in a tree of size leaves (index < size).
func auditLen(index, size uint64) int {
	inner := bits.Len64(index ^ (size - 1))
	return inner + bits.OnesCount64(index>>inner)
}

// sharedTail is the number of last hashes a and b have in common.
func sharedTail(a, b [][]byte) int {
	n := 0
	for n < len(a) && n < len(b) && bytes.Equal(a[len(a)-1-n], b[len(b)-1-n]) {
		n++
	}
	return n
}

// Marshal returns the bundle file bytes of b.
func (b *Bundle) Marshal() ([]byte, error) {
	j := &bundleJSON{Format: BundleFormat, Kind: b.Kind, Path: b.Path, Applied: b.Applied, Size: b.Size,
		Leaves: make([]proofLeafJSON, len(b.Leaves)), Head: b.Head}
	for i, l := range b.Leaves {
		e := &l.Entry
		own := l.Inclusion
		if i > 0 {
			own = own[:len(own)-sharedTail(own, b.Leaves[i-1].Inclusion)]
		}
		j.Leaves[i] = proofLeafJSON{Index: l.Index, Inclusion: bytes.Join(own, nil),
			Entry: entryJSON{Path: e.Path, Change: e.Change, Old: stateToJSON(e.Old), New: stateToJSON(e.New)}}
	}
	out, err := canonicalJSON(j)
	if err != nil {
		return nil, fmt.Errorf("encode bundle: %w", err)
	}
	return append(out, '\n'), nil
}

// ParseBundle strictly parses a bundle file: its size, its one valid
// encoding (no unknown, duplicate or case-variant members, no trailing
// data, audit paths shared as far as they can be), its format tag and
// every value, and completes each leaf's audit path. It checks no
// signature or proof (VerifyBundle does). Its errors wrap ErrMalformed.
func ParseBundle(file []byte) (*Bundle, error) {
	if len(file) > MaxBundleSize {
		return nil, malformed("bundle of %d bytes is over the limit of %d", len(file), MaxBundleSize)
	}
	var j bundleJSON
	if err := strictJSON(file, &j, "bundle"); err != nil {
		return nil, formatFirst(file, BundleFormat, err)
	}
	if j.Format != BundleFormat {
		return nil, malformed("unsupported format %q (this version reads %q)", j.Format, BundleFormat)
	}
	if err := canonicalCheck(file, &j, true, "bundle"); err != nil {
		return nil, err
	}
	b := &Bundle{Kind: j.Kind, Path: j.Path, Applied: j.Applied, Size: j.Size, Head: j.Head}
	switch b.Kind {
	case Inclusion, Absence, Subtree:
	default:
		return nil, malformed("bundle: unknown kind %q", b.Kind)
	}
	if err := b.Path.Valid(); err != nil {
		return nil, malformed("bundle: %v", err)
	}
	if n := len(j.Leaves); b.Kind == Inclusion && n != 1 || b.Kind == Absence && n > 2 {
		return nil, malformed("%s bundle with %d leaves", b.Kind, n)
	}
	for i, l := range j.Leaves {
		if l.Index >= b.Size || i > 0 && l.Index <= j.Leaves[i-1].Index {
			return nil, malformed("bundle: leaf index %d out of order or not below the size %d", l.Index, b.Size)
		}
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
		if len(l.Inclusion)%sha256.Size != 0 {
			return nil, malformed("bundle: leaf %d: inclusion of %d bytes is not a whole number of 32-byte hashes", l.Index, len(l.Inclusion))
		}
		for h := range slices.Chunk(l.Inclusion, sha256.Size) {
			pl.Inclusion = append(pl.Inclusion, h)
		}
		if i > 0 {
			// Complete the audit path with the previous one's last hashes.
			// A length that cannot be completed is left as it is: its
			// inclusion proof fails.
			prev := b.Leaves[i-1].Inclusion
			own := len(pl.Inclusion)
			if s := auditLen(pl.Index, b.Size) - own; s > 0 && s <= len(prev) {
				pl.Inclusion = append(pl.Inclusion, prev[len(prev)-s:]...)
			}
			if sharedTail(pl.Inclusion[:own], prev[:len(prev)-min(len(prev), len(pl.Inclusion)-own)]) > 0 {
				return nil, malformed("bundle: leaf %d repeats hashes of the previous leaf's audit path", l.Index)
			}
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
	// Entry is the path's change, for an inclusion bundle, and for a
	// subtree bundle when the path itself changed.
	Entry *Entry
	// Changed are the changes at or under the path, in path order, for a
	// subtree bundle: empty when nothing there changed.
	Changed []Entry
	// Neighbours are the leaves next to where the path (for a subtree,
	// each of its two ranges) would sort, for an absence or subtree
	// bundle, in path order.
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

// ProofOptions are what VerifyBundleWith checks beside the bundle itself.
type ProofOptions struct {
	// SessionID, when not empty, is the one session the bundle's head may
	// be of.
	SessionID string
	// Launch, when not nil, is the session's launch record envelope: it
	// must verify with the same key, and the head must be bound to it.
	Launch []byte
}

// VerifyBundle verifies a bundle file with pub: it parses it strictly
// (ParseBundle), verifies its head (VerifyHead), which must be a
// statement's, and checks every leaf's inclusion proof in the tree of the
// head's root and size, that the bundle's size is that size, and the
// bundle's claim (see Bundle): for inclusion, that the leaf's path is the
// path; for absence, that the leaves are adjacent and bracket the path;
// for a subtree, that its leaves are every leaf at or under the path and
// the adjacent ones that bracket them.
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
//
// A bundle names its session; VerifyBundle accepts one of any session
// signed with pub. A caller who holds one session checks it with
// VerifyBundleWith.
func VerifyBundle(file []byte, pub PublicKey) (*Proven, error) {
	return VerifyBundleWith(file, pub, ProofOptions{})
}

// VerifyBundleWith is VerifyBundle, and also refuses, as not verified, a
// bundle whose head is not of opts.SessionID or not bound to opts.Launch
// (each when given).
func VerifyBundleWith(file []byte, pub PublicKey, opts ProofOptions) (*Proven, error) {
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
	if err := h.bound(opts, pub); err != nil {
		return nil, err
	}
	return b.verifyAgainst(h)
}

// bound checks that h is of opts.SessionID and bound to opts.Launch.
func (h *Head) bound(opts ProofOptions, pub PublicKey) error {
	if opts.SessionID != "" && h.SessionID != opts.SessionID {
		return fmt.Errorf("%w: the proof is of session %s, not of session %q", ErrNotVerified, h.SessionID, opts.SessionID)
	}
	if opts.Launch != nil {
		l, err := VerifyLaunch(opts.Launch, pub)
		if err != nil {
			return fmt.Errorf("the launch record: %w", err)
		}
		sum := sha256.Sum256(opts.Launch)
		if !bytes.Equal(h.Launch, sum[:]) || h.SessionID != l.SessionID {
			return fmt.Errorf("%w: the proof is of session %s, not of the launch record's session %s", ErrNotVerified, h.SessionID, l.SessionID)
		}
	}
	return nil
}

// verifyAgainst checks b's leaves and claim against h, a statement's head
// that verified.
func (b *Bundle) verifyAgainst(h *Head) (*Proven, error) {
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

// span is a range of paths: those from lo up to, not including, hi (no
// upper bound when open). single marks the range of one path.
type span struct {
	lo, hi       Path
	open, single bool
}

func (s span) holds(p Path) bool { return p >= s.lo && (s.open || p < s.hi) }

// spans are the ranges of paths a bundle of kind about p speaks of.
func spans(kind string, p Path) []span {
	one := span{lo: p, hi: p + "\x00", single: true} // no path lies between p and p+NUL
	switch {
	case kind != Subtree:
		return []span{one}
	case p == Root:
		return []span{{open: true}}
	}
	// Every path that begins with p+"/" sorts from p+"/" up to p+"0".
	return []span{one, {lo: p + "/", hi: p + "0"}}
}

// indexSpan returns the indices [a, z) of the leaves es (sorted by path)
// that lie in s.
func (s span) indexSpan(es []Entry) (a, z int) {
	a = sort.Search(len(es), func(i int) bool { return es[i].Path >= s.lo })
	z = len(es)
	if !s.open {
		z = sort.Search(len(es), func(i int) bool { return es[i].Path >= s.hi })
	}
	return a, z
}

// proofIndices are the leaves a bundle about the spans ss shows, of es
// (sorted by path), in index order.
func proofIndices(es []Entry, ss []span) []int {
	var idx []int
	for _, s := range ss {
		a, z := s.indexSpan(es)
		if s.single && a < z {
			idx = append(idx, a)
			continue
		}
		if a > 0 {
			idx = append(idx, a-1)
		}
		for i := a; i < z; i++ {
			idx = append(idx, i)
		}
		if z < len(es) {
			idx = append(idx, z)
		}
	}
	slices.Sort(idx)
	return slices.Compact(idx)
}

// covered checks that the leaves ls (verified, in index order) show every
// leaf of the tree of size leaves that lies in s: those of ls in s sit at
// contiguous indices, and the leaf just before and just after them (or
// where they would be) is shown too, unless the range reaches an end of
// the tree. It marks the roles of the leaves it used and returns those in
// s.
func covered(ls []ProofLeaf, size uint64, s span, role []uint8) ([]ProofLeaf, bool) {
	before, first, end, after := -1, -1, -1, -1
	for i := range ls {
		switch p := ls[i].Entry.Path; {
		case p < s.lo:
			before = i
		case s.holds(p):
			if first < 0 {
				first = i
			}
			end = i + 1
		case after < 0:
			after = i
		}
	}
	var a, z uint64 // the tree's indices of the range
	switch {
	case first >= 0:
		a, z = ls[first].Index, ls[end-1].Index+1
		if z-a != uint64(end-first) {
			return nil, false // a gap: indices strictly increase
		}
		for i := first; i < end; i++ {
			role[i] |= inRange
		}
		if s.single {
			return ls[first:end], end-first == 1
		}
	case after >= 0:
		a, z = ls[after].Index, ls[after].Index
	case before >= 0:
		a, z = ls[before].Index+1, ls[before].Index+1
	}
	if a > 0 {
		if before < 0 || ls[before].Index != a-1 {
			return nil, false
		}
		role[before] |= bracket
	}
	if z < size {
		if after < 0 || ls[after].Index != z {
			return nil, false
		}
		role[after] |= bracket
	}
	if first < 0 {
		return nil, true
	}
	return ls[first:end], true
}

// The roles of a bundle's leaf.
const (
	inRange uint8 = 1 << iota // in a range the bundle speaks of
	bracket                   // next to one
)

// claim checks that b's verified leaves show its claim, and records it in p.
func (b *Bundle) claim(p *Proven) error {
	ls := b.Leaves
	role := make([]uint8, len(ls))
	for _, s := range spans(b.Kind, b.Path) {
		in, ok := covered(ls, b.Size, s, role)
		if !ok || b.Kind == Inclusion && len(in) != 1 || b.Kind == Absence && len(in) != 0 {
			return ErrNotVerified
		}
		if s.single && len(in) == 1 {
			e := in[0].Entry
			p.Entry = &e
		}
	}
	for i, l := range ls {
		switch {
		case role[i] == 0:
			return malformed("bundle: the leaf at index %d is not part of what the bundle shows", l.Index)
		case role[i]&inRange != 0 && b.Kind == Subtree:
			p.Changed = append(p.Changed, l.Entry)
		case role[i]&inRange == 0:
			p.Neighbours = append(p.Neighbours, l.Entry)
		}
	}
	if i := slices.IndexFunc(p.Changed, func(e Entry) bool { return e.Path == b.Path }); i >= 0 {
		e := p.Changed[i]
		p.Entry = &e
	}
	return nil
}

// Covers returns the reasons of h that cover path p: those on p, an
// ancestor or a descendant of it, and those that cover the whole walk
// (no path, no mount IDs, a budget or limit that cut the walk short);
// and the excluded subtree that holds p or lies under it ("" when none).
// With either, the head's change set does not settle what happened at p,
// nor under it.
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

// Prover makes proof bundles of one statement's change sets against its
// signed head.
type Prover struct {
	head    []byte
	h       *Head
	entries [2][]Entry // observed, applied
	trees   [2]*Tree
}

// NewProver returns a Prover of st, a statement that verified, whose
// signed head's envelope file is headEnv: it must be the head of st
// (HeadOf), or NewProver fails. It builds the Merkle trees of st's change
// sets (NewTree).
func NewProver(st *Statement, headEnv []byte) (*Prover, error) {
	h, err := ReadHead(headEnv)
	if err != nil {
		return nil, fmt.Errorf("read the head: %w", err)
	}
	if !h.Equal(HeadOf(st)) {
		return nil, errors.New("the head is not the head of this statement")
	}
	return newProver(h, headEnv, st.Entries, st.AppliedEntries(), st.Violations != nil)
}

// newProver builds the trees of the observed and (when distinct) the
// applied change set and checks their roots and sizes against h's.
func newProver(h *Head, headEnv []byte, observed, applied []Entry, distinct bool) (*Prover, error) {
	if h.Kind != HeadKindStatement {
		return nil, fmt.Errorf("the head is the head of a %s, not of a statement", h.Kind)
	}
	pr := &Prover{head: bytes.Clone(headEnv), h: h, entries: [2][]Entry{observed, applied}}
	for k, es := range pr.entries {
		if k == 1 && !distinct {
			pr.trees[1] = pr.trees[0]
			break
		}
		t, err := NewTree(es)
		if err != nil {
			return nil, err
		}
		root, size := h.Root, h.Count
		if k == 1 {
			root, size = h.AppliedRoot, h.AppliedCount
		}
		if t.Size() != size || !bytes.Equal(t.root, root) {
			return nil, errors.New("the head is not the head of this statement: its root or count differs (are they of two runs, or was one altered?)")
		}
		pr.trees[k] = t
	}
	return pr, nil
}

// OpenProver reads the statement of the output directory out and its
// signed head (StatementFile and HeadFile beside it) and returns their
// Prover. It reads the statement's change sets only, checks no signature
// and builds each tree once: what it proves is checked against the head,
// whose roots and counts must be those of the change sets it read.
func OpenProver(out string) (*Prover, error) {
	headFile := filepath.Join(out, HeadFile(StatementFile))
	headEnv, err := ReadArtifact(headFile)
	if err != nil {
		return nil, err
	}
	h, err := ReadHead(headEnv)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", headFile, err)
	}
	stFile := filepath.Join(out, StatementFile)
	stEnv, err := ReadArtifact(stFile)
	if err != nil {
		return nil, err
	}
	observed, applied, distinct, err := readChangeSets(stEnv)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", stFile, err)
	}
	pr, err := newProver(h, headEnv, observed, applied, distinct)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", headFile, err)
	}
	return pr, nil
}

// readChangeSets reads the observed and the applied change set of a
// statement's envelope file, and whether the applied one is listed apart.
// It reads nothing else of it and checks no signature, root or encoding:
// its caller compares the trees with a signed head.
func readChangeSets(env []byte) (observed, applied []Entry, distinct bool, err error) {
	if len(env) > MaxStatementSize {
		return nil, nil, false, malformed("envelope of %d bytes is over the limit of %d", len(env), MaxStatementSize)
	}
	var e struct {
		Payload []byte `json:"payload"`
	}
	if err := json.Unmarshal(env, &e); err != nil {
		return nil, nil, false, malformed("decode envelope: %s", jsonProblem(err))
	}
	var p struct {
		PredicateType string `json:"predicateType"`
		Predicate     struct {
			Changes []entryJSON  `json:"changes"`
			Applied *[]entryJSON `json:"applied"`
		} `json:"predicate"`
	}
	if err := json.Unmarshal(e.Payload, &p); err != nil {
		return nil, nil, false, malformed("decode statement: %s", jsonProblem(err))
	}
	if p.PredicateType != StatementPredicateType {
		return nil, nil, false, malformed("not a statement: format %q", p.PredicateType)
	}
	if observed, err = entriesFromJSON(p.Predicate.Changes); err != nil {
		return nil, nil, false, err
	}
	if p.Predicate.Applied == nil {
		return observed, observed, false, nil
	}
	applied, err = entriesFromJSON(*p.Predicate.Applied)
	return observed, applied, true, err
}

// entriesFromJSON converts entries, with their states and digests in one
// allocation each.
func entriesFromJSON(js []entryJSON) ([]Entry, error) {
	n := 0
	for i := range js {
		n += b2i(js[i].Old != nil) + b2i(js[i].New != nil)
	}
	es, states, digests := make([]Entry, len(js)), make([]State, n), make([]byte, n*sha256.Size)
	state := func(j *stateJSON) (*State, error) {
		if j == nil {
			return nil, nil
		}
		s := &states[0]
		states = states[1:]
		*s = State{Type: j.Type, Mode: j.Mode, UID: j.UID, GID: j.GID, Size: j.Size, MtimeNS: j.MtimeNS, Target: j.Target, Rdev: j.Rdev, Link: j.Link}
		if j.SHA256 != "" {
			d := digests[:sha256.Size:sha256.Size]
			if n, err := hex.Decode(d, []byte(j.SHA256)); err != nil || n != sha256.Size || len(j.SHA256) != 2*sha256.Size {
				return nil, fmt.Errorf("sha256 %q is not 64 hex digits", j.SHA256)
			}
			s.SHA256, digests = d, digests[sha256.Size:]
		}
		for _, x := range j.Xattrs {
			s.Xattrs = append(s.Xattrs, Xattr{Name: string(x.Name), Value: nilIfEmpty(x.Value)})
		}
		return s, nil
	}
	for i := range js {
		j, e := &js[i], &es[i]
		e.Path, e.Change = j.Path, j.Change
		var err error
		if e.Old, err = state(j.Old); err == nil {
			e.New, err = state(j.New)
		}
		if err != nil {
			return nil, malformed("entry %q: %v", j.Path.String(), err)
		}
	}
	return es, nil
}

// Head returns the head the prover proves against.
func (pr *Prover) Head() *Head { return pr.h }

// Prove returns the bundle file of path: an inclusion bundle when path
// is in the change set (with applied, the applied change set), else an
// absence bundle. Each costs O(log n) for n changes.
func (pr *Prover) Prove(path Path, applied bool) ([]byte, error) {
	kind := Absence
	if _, ok := pr.find(path, applied); ok {
		kind = Inclusion
	}
	return pr.prove(kind, path, applied)
}

// ProveSubtree returns the subtree bundle of path: every change at or
// under path (none when nothing there changed), and the changes next to
// them in path order. It costs O(k log n) for k changes there.
func (pr *Prover) ProveSubtree(path Path, applied bool) ([]byte, error) {
	return pr.prove(Subtree, path, applied)
}

func (pr *Prover) find(path Path, applied bool) (int, bool) {
	es := pr.entries[b2i(applied)]
	i := sort.Search(len(es), func(i int) bool { return es[i].Path >= path })
	return i, i < len(es) && es[i].Path == path
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (pr *Prover) prove(kind string, path Path, applied bool) ([]byte, error) {
	if err := path.Valid(); err != nil {
		return nil, fmt.Errorf("prove: %w", err)
	}
	k := b2i(applied)
	es, t := pr.entries[k], pr.trees[k]
	b := &Bundle{Kind: kind, Path: path, Applied: applied, Size: t.Size(), Head: pr.head}
	for _, j := range proofIndices(es, spans(kind, path)) {
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
