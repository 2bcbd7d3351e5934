package policy

import "github.com/layerseal/layerseal/attest"

// Rules decides, path by path, what a session's policy says: which paths
// are summarized instead of itemized, and which changes are forbidden.
type Rules struct {
	Exclude   []*Glob
	Protected []*Glob
	Allow     []*Glob // per-run permissions to change protected paths
}

// Excluded reports whether the subtree at p is summarized (counted, not
// itemized): some exclude glob matches p, p is not the workspace root, and
// no protected glob can match p or anything beneath it — protected paths
// are always itemized, so an exclusion yields to them.
func (r *Rules) Excluded(p attest.Path) bool {
	if p == attest.Root || len(r.Exclude) == 0 {
		return false
	}
	hit := false
	for _, g := range r.Exclude {
		if g.Match(p) {
			hit = true
			break
		}
	}
	if !hit {
		return false
	}
	for _, g := range r.Protected {
		if g.MayMatchWithin(p) {
			return false
		}
	}
	return true
}

// Violation returns the protected glob a change at p breaks, or "" when p
// matches no protected glob or an allow covers it.
func (r *Rules) Violation(p attest.Path) string {
	rule := ""
	for _, g := range r.Protected {
		if g.Match(p) {
			rule = g.text
			break
		}
	}
	if rule == "" {
		return ""
	}
	for _, g := range r.Allow {
		if g.Match(p) {
			return ""
		}
	}
	return rule
}

// UnusedAllows returns the allows that can match no protected path: they
// grant nothing, which is most likely a mistake worth a warning.
func (r *Rules) UnusedAllows() []*Glob {
	var out []*Glob
	for _, a := range r.Allow {
		used := false
		for _, g := range r.Protected {
			if a.Overlaps(g) {
				used = true
				break
			}
		}
		if !used {
			out = append(out, a)
		}
	}
	return out
}
