package layerseal

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"

	"github.com/layerseal/layerseal/attest"
)

// signBounded signs st, never larger than limit bytes (and never larger
// than attest.MaxStatementSize, what verify reads): when the statement
// would be, it lists fewer entries — the first ones in path order — and
// says where the list stops in an entry-budget reason, so a change set
// too large to state is incomplete, never unverifiable. The entries left
// out are not applied (the reason makes apply partial).
func signBounded(key *attest.Signer, st *attest.Statement, limit int) ([]byte, error) {
	limit = min(limit, attest.MaxStatementSize)
	for {
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
		// The attempt's encoding, as large as the limit or larger, is
		// garbage now: collect it before the next rather than let the
		// two add up at the end of a session.
		runtime.GC()
		size := int64(len(b))
		if size == 0 {
			size = 2 * int64(limit) // over MaxStatementSize: at least that
		}
		k := int64(len(st.Entries)) * int64(limit) / size * 9 / 10
		cutStatement(st, int(min(k, int64(len(st.Entries)-1))), limit)
	}
}

// cutStatement keeps the first k entries of st (and of its applied list,
// those before the first entry dropped; the violations stay, the sweep
// having reverted them all the same) and adds the reason.
func cutStatement(st *attest.Statement, k, limit int) {
	cut := st.Entries[k].Path
	before := func(p attest.Path) bool { return strings.Compare(string(p), string(cut)) < 0 }
	st.Entries = st.Entries[:k:k]
	if st.Applied != nil {
		var kept []attest.Entry
		for _, e := range st.Applied {
			if before(e.Path) {
				kept = append(kept, e)
			}
		}
		st.Applied = append([]attest.Entry{}, kept...)
	}
	r := attest.Reason{Code: attest.EntryBudget, Path: cut,
		Detail: fmt.Sprintf("the statement would be larger than the %d bytes a verifier reads: the entries from here on were not listed", limit)}
	// An earlier cut's reason gives way to this one, further up.
	st.Incomplete = slices.DeleteFunc(st.Incomplete, func(o attest.Reason) bool { return o.Code == r.Code && o.Detail == r.Detail })
	st.Incomplete = sortReasons(append(st.Incomplete, r))
}
