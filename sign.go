package layerseal

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"

	"github.com/layerseal/layerseal/attest"
)

// signBounded signs st, never larger than limit bytes (and never larger
// than attest.MaxStatementSize, what verify reads): when the statement
// would be, it lists fewer entries — the first ones in path order, as
// many as fit or a few fewer — and says where the list stops in an
// entry-budget reason, so a change set too large to state is incomplete,
// never unverifiable. The entries left out are not applied (the reason
// makes apply partial), and st no longer refers to them.
//
// To find how many fit it measures each entry's encoded size once
// (attest.EncodedSizes, with its subject's) and predicts the envelope's
// size at each cut from one it measured, signing again until an attempt
// fits: the prediction is exact but for the length of the path the cut's
// reason names, the digits of the counts and the base64's rounding, so
// this takes one attempt more, or two.
func signBounded(key *attest.Signer, st *attest.Statement, limit int) ([]byte, error) {
	limit = min(limit, attest.MaxStatementSize)
	b, err := attest.SignStatement(key, st)
	if err == nil && len(b) <= limit {
		return b, nil
	}
	if err != nil && !errors.Is(err, attest.ErrTooLarge) {
		return nil, err
	}
	if len(st.Entries) == 0 {
		return nil, fmt.Errorf("the statement is over %d bytes with no entries: %w", limit, attest.ErrTooLarge)
	}
	p, err := newPrefixSizes(st)
	if err != nil {
		return nil, err
	}
	// at and size are the cut and envelope size of the last attempt
	// whose size is known (an encoding that stopped at
	// attest.MaxStatementSize has none): size 0, none yet.
	at, size := len(st.Entries), int64(len(b))
	b = nil
	fits, over := -1, len(st.Entries) // the most known to fit, the fewest known not to
	for {
		// The attempt's encoding, as large as the limit or larger, is
		// garbage now: collect it before the next rather than let the
		// two add up at the end of a session.
		runtime.GC()
		k := 0 // nothing to predict from yet: measure the statement with no entries
		if size != 0 {
			k = p.cut(at, size, int64(limit))
		}
		k = max(fits+1, min(k, over-1))
		cut := cutStatement(st, k, limit)
		b, err = attest.SignStatement(key, cut)
		if err != nil && !errors.Is(err, attest.ErrTooLarge) {
			return nil, err
		}
		switch {
		case err == nil && len(b) <= limit && (size != 0 || k == over-1):
			// A predicted cut fits (the prediction is exact up to a
			// few bytes), or nothing larger is left to try: keep it.
			dropped := st.Entries[k:]
			*st = *cut
			clear(dropped) // free the entries not listed
			return b, nil
		case err == nil && len(b) <= limit:
			fits = k
		case k == 0:
			return nil, fmt.Errorf("the statement is over %d bytes with no entries: %w", limit, attest.ErrTooLarge)
		default:
			over = k
		}
		if len(b) > 0 {
			at, size = k, int64(len(b))
		}
		b = nil
	}
}

// prefixSizes holds what each entry of a statement adds to its envelope:
// the sum of the encoded sizes of the first k entries, and of the applied
// entries before each cut.
type prefixSizes struct {
	entries []int64 // entries[k]: the first k entries
	applied []int64 // applied[k]: the applied entries before entry k's path (all for k = len)
}

func newPrefixSizes(st *attest.Statement) (*prefixSizes, error) {
	sum := func(es []attest.Entry, subjects bool) ([]int64, error) {
		sizes, err := attest.EncodedSizes(es, subjects)
		if err != nil {
			return nil, err
		}
		s := make([]int64, len(sizes)+1)
		for i, n := range sizes {
			s[i+1] = s[i] + int64(n)
		}
		return s, nil
	}
	entries, err := sum(st.Entries, true)
	if err != nil {
		return nil, err
	}
	p := &prefixSizes{entries: entries, applied: make([]int64, len(st.Entries)+1)}
	if st.Applied != nil {
		applied, err := sum(st.Applied, false)
		if err != nil {
			return nil, err
		}
		// Both lists are sorted by path: the applied entries before
		// entry k's path are a prefix of them.
		j := 0
		for k := range st.Entries {
			for j < len(st.Applied) && strings.Compare(string(st.Applied[j].Path), string(st.Entries[k].Path)) < 0 {
				j++
			}
			p.applied[k] = applied[j]
		}
		p.applied[len(st.Entries)] = applied[len(st.Applied)]
	}
	return p, nil
}

// bytes is the payload bytes of the entries and applied entries a cut at
// k keeps.
func (p *prefixSizes) bytes(k int) int64 { return p.entries[k] + p.applied[k] }

// cut returns the largest cut whose envelope is predicted to be at most
// limit bytes, from an envelope of size bytes measured with a cut at at:
// the payload is in base64 there, four bytes for each three.
func (p *prefixSizes) cut(at int, size, limit int64) int {
	base := p.bytes(at)
	n := len(p.entries) - 1
	// The first k past the largest that fits; bytes grows with k.
	k := sort.Search(n+1, func(k int) bool {
		return size+(p.bytes(k)-base)*4/3+4 > limit
	})
	return max(k-1, 0)
}

// cutStatement returns a copy of st that keeps its first k entries (and
// of its applied list, those before the first entry dropped; the
// violations stay, the sweep having reverted them all the same) and adds
// the entry-budget reason, naming the first entry left out. st is not
// changed; the copy shares its entries.
func cutStatement(st *attest.Statement, k, limit int) *attest.Statement {
	cut := *st
	first := st.Entries[k].Path
	cut.Entries = st.Entries[:k:k]
	if st.Applied != nil {
		cut.Applied = []attest.Entry{}
		for _, e := range st.Applied {
			if strings.Compare(string(e.Path), string(first)) < 0 {
				cut.Applied = append(cut.Applied, e)
			}
		}
	}
	r := attest.Reason{Code: attest.EntryBudget, Path: first,
		Detail: fmt.Sprintf("the statement would be larger than the %d bytes a verifier reads: the entries from here on were not listed", limit)}
	// An earlier cut's reason gives way to this one, further up.
	cut.Incomplete = slices.DeleteFunc(slices.Clone(st.Incomplete), func(o attest.Reason) bool { return o.Code == r.Code && o.Detail == r.Detail })
	cut.Incomplete = sortReasons(append(cut.Incomplete, r))
	return &cut
}
