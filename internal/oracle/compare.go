package oracle

import (
	"fmt"
	"reflect"
	"slices"
	"sort"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/treediff"
)

// Compare checks a change list against the naive full-tree diff and returns
// one line per disagreement (none when they agree). A directory the list
// calls replaced is one the naive diff sees as unchanged or with new
// metadata: its children are compared one by one in both.
func Compare(got []attest.Entry, want []treediff.Change) []string {
	g := map[string]string{}
	for _, e := range got {
		g[string(e.Path)] = string(e.Change)
	}
	w := map[string]string{}
	for _, c := range want {
		w[c.Path] = c.Change
	}
	var out []string
	for p, wc := range w {
		gc, ok := g[p]
		if gc == string(attest.Replaced) && wc == "metadata" {
			continue
		}
		if !ok || gc != wc {
			out = append(out, fmt.Sprintf("%q: change list says %q, full-tree diff says %q", p, gc, wc))
		}
	}
	for p, gc := range g {
		if _, ok := w[p]; !ok && gc != string(attest.Replaced) {
			out = append(out, fmt.Sprintf("%q: change list says %q, full-tree diff sees no change", p, gc))
		}
	}
	sort.Strings(out)
	return out
}

// Shrink returns a 1-minimal subsequence of ops for which fails still
// holds (fails(ops) must hold on entry): delta debugging over the list,
// removing ever smaller chunks, then single operations. It calls fails
// O(n²) times at worst, usually O(n log n).
func Shrink(ops []Op, fails func([]Op) bool) []Op {
	n := 2
	for len(ops) >= 2 {
		chunk := (len(ops) + n - 1) / n
		reduced := false
		for start := 0; start < len(ops); start += chunk {
			end := min(start+chunk, len(ops))
			rest := append(append([]Op(nil), ops[:start]...), ops[end:]...)
			if fails(rest) {
				ops, reduced = rest, true
				n = max(n-1, 2)
				break
			}
		}
		if !reduced {
			if chunk == 1 {
				break
			}
			n = min(2*n, len(ops))
		}
	}
	return ops
}

// EqualApplied reports the first difference between the merged view the
// agent left (want) and the workspace after applying the change list
// (got), or "". They must be identical but for one thing overlayfs does
// on its own: with index=off, copying up one of several hard-linked lower
// files breaks the link in the merged view even when nothing changed, and
// a change list rightly holds no entry for it. Apply keeps such a lower
// link (the other name is not listed), also when the agent linked new
// names to the copied-up file. So got may hold an extra link between p
// and q when an unchanged path that is p or shares p's inode in want was
// linked in before to an unchanged path that is q or shares q's.
func EqualApplied(want, got, before treediff.Manifest, changed map[string]bool) string {
	group := func(p string) []string {
		var out []string
		for _, r := range append([]string{p}, want[p].Links...) {
			if !changed[r] {
				out = append(out, r)
			}
		}
		return out
	}
	lowerLinked := func(p, q string) bool {
		for _, r1 := range group(p) {
			for _, r2 := range group(q) {
				if slices.Contains(before[r1].Links, r2) {
					return true
				}
			}
		}
		return false
	}
	for p, w := range want {
		g, ok := got[p]
		if !ok {
			return fmt.Sprintf("%q missing", p)
		}
		g.Links = slices.DeleteFunc(slices.Clone(g.Links), func(q string) bool {
			return !slices.Contains(w.Links, q) && lowerLinked(p, q)
		})
		if len(g.Links) == 0 {
			g.Links = nil
		}
		if !reflect.DeepEqual(w, g) {
			return fmt.Sprintf("%q differs:\nwant %+v\ngot  %+v", p, w, g)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			return fmt.Sprintf("%q unexpected", p)
		}
	}
	return ""
}
