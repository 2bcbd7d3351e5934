package overlay

import (
	"fmt"
	"slices"
	"strings"

	"github.com/layerseal/layerseal/attest"
)

// ReadChanged is Read for a layer that was read before, as prev, and has
// changed since only where dirty says so: dirty(p) must report whether
// the upper entry at p, or any upper entry beneath it, was added, removed
// or changed (in type, mode, inode, size, mtime or ctime) since prev was
// read, or may have changed without its stat showing it (racy). The lower
// layer must be the one prev was read against.
//
// Every clean upper subtree — an upper entry p with dirty(p) false —
// takes its entries, reasons and excluded summary from prev instead of
// being examined (but for an excluded subtree holding a symlink whose
// target was resolved through entries outside it, which is examined
// again); the rest is classified as Read does, each dirty
// directory's ancestors included, so the result equals a fresh Read of
// the same layers. A clean subtree is re-examined all the same when its
// context changed: its parent gained or lost a lower directory, or became
// or stopped being opaque. Stats count only what was examined, and the
// entry budget applies to that alone.
//
// prev must come from Read or ReadChanged of the same layers with the same
// options; its Incomplete must hold no TimeBudget, EntryBudget or PathLimit reason
// (the read stopped part-way: read again from scratch).
func ReadChanged(upper, lower string, prev *Changes, dirty func(p attest.Path) bool, opt ReadOptions) (*Changes, error) {
	if prev == nil || dirty == nil {
		return nil, fmt.Errorf("read changed: no previous read")
	}
	for _, rs := range prev.Incomplete {
		if rs.Code.Cut() {
			return nil, fmt.Errorf("read changed: the previous read stopped at %q (%s)", rs.Path, rs.Code)
		}
	}
	opt.reuse = newReuse(prev, dirty)
	return Read(upper, lower, opt)
}

// reuse is what ReadChanged takes from the previous read, each list
// sorted by path bytes, so a subtree is one contiguous run.
type reuse struct {
	dirty    func(attest.Path) bool
	entries  []attest.Entry
	reasons  []attest.Reason
	excluded []attest.Excluded
}

func newReuse(prev *Changes, dirty func(attest.Path) bool) *reuse {
	if out := prev.outward; len(out) > 0 {
		// Their symlinks' targets depend on entries outside them.
		clean := dirty
		dirty = func(p attest.Path) bool {
			return clean(p) || slices.ContainsFunc(out, func(x attest.Path) bool { return attest.Within(x, p) })
		}
	}
	u := &reuse{dirty: dirty, entries: prev.Entries, excluded: prev.Excluded}
	u.reasons = slices.Clone(prev.Incomplete)
	slices.SortStableFunc(u.reasons, func(a, b attest.Reason) int { return strings.Compare(string(a.Path), string(b.Path)) })
	if !slices.IsSortedFunc(u.entries, byEntryPath) {
		u.entries = slices.SortedFunc(slices.Values(u.entries), byEntryPath)
	}
	return u
}

func byEntryPath(a, b attest.Entry) int { return strings.Compare(string(a.Path), string(b.Path)) }

// eachIn calls fn for every item of list (sorted by key bytes) at p or
// beneath it: the run equal to p, then the run with prefix p+"/".
func eachIn[T any](list []T, key func(*T) attest.Path, p attest.Path, fn func(T)) {
	for _, q := range []attest.Path{p, p + "/"} {
		i, _ := slices.BinarySearchFunc(list, q, func(x T, q attest.Path) int { return strings.Compare(string(key(&x)), string(q)) })
		for ; i < len(list) && attest.Within(key(&list[i]), p) && (q == p) == (key(&list[i]) == p); i++ {
			fn(list[i])
		}
	}
}

// take copies the previous read's results for the clean subtree at p.
func (r *reader) take(p attest.Path) {
	u := r.opt.reuse
	eachIn(u.entries, func(e *attest.Entry) attest.Path { return e.Path }, p, func(e attest.Entry) { r.entries = append(r.entries, e) })
	eachIn(u.reasons, func(x *attest.Reason) attest.Path { return x.Path }, p, func(x attest.Reason) { r.reasons = append(r.reasons, x) })
	eachIn(u.excluded, func(x *attest.Excluded) attest.Path { return x.Path }, p, func(x attest.Excluded) { r.excluded = append(r.excluded, x) })
}

// reusable reports whether the upper subtree at p can be taken from the
// previous read.
func (r *reader) reusable(p attest.Path) bool {
	return r.opt.reuse != nil && !r.fresh && !r.opt.reuse.dirty(p)
}

// prevContext is what the previous read found for the upper directory at
// p about its children's context: whether it had a lower directory and
// whether that was hidden (p or an ancestor opaque). It is asked only
// when p's parent kept its context, so the parent's hidden state then was
// outer.
func (r *reader) prevContext(p attest.Path, outer bool) (hasLower, hidden bool) {
	hasLower, hidden = true, outer
	es := r.opt.reuse.entries
	if i, ok := slices.BinarySearchFunc(es, p, func(e attest.Entry, p attest.Path) int { return strings.Compare(string(e.Path), string(p)) }); ok {
		switch es[i].Change {
		case attest.Added, attest.TypeChange:
			hasLower = false
		case attest.Replaced:
			hidden = true
		}
	}
	return hasLower, hidden
}
