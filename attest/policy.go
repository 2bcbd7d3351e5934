package attest

import (
	"fmt"
	"strings"
)

// Excluded is one subtree the session's policy declared out of the
// itemized scope (an exclusion): its changes are counted, not listed or
// hashed one by one, and applied with the rest.
type Excluded struct {
	Path    Path
	Entries uint64 // upper-layer entries in the subtree, its root included
	Bytes   uint64 // bytes of the regular files among them
}

// Action is what the sweep did about a violation.
type Action string

const (
	Reverted Action = "reverted" // the upper layer shows the lower layer's state at the path again
	Blocked  Action = "blocked"  // the revert failed: the change is still in the upper layer
)

// Violation is a change on a protected path that no allow covered.
type Violation struct {
	Path   Path
	Rule   string // the protected glob it broke, as written, or a built-in rule's name
	Action Action
}

type excludedJSON struct {
	Path    Path   `json:"path"`
	Entries uint64 `json:"entries,string"`
	Bytes   uint64 `json:"bytes,string"`
}

type violationJSON struct {
	Path   Path   `json:"path"`
	Rule   Bytes  `json:"rule"`
	Action Action `json:"action"`
}

// AppliedEntries returns the change set the sweep left to apply: Applied
// when the sweep found violations, Entries otherwise.
func (st *Statement) AppliedEntries() []Entry {
	if len(st.Violations) == 0 {
		return st.Entries
	}
	return st.Applied
}

// validatePolicy checks the excluded subtrees (sorted, unique, none inside
// another) and the violations (sorted by path, unique, known action,
// non-empty rule without NUL).
func (st *Statement) validatePolicy() error {
	for i, x := range st.Excluded {
		if err := x.Path.Valid(); err != nil {
			return fmt.Errorf("excluded: %w", err)
		}
		if x.Path == Root {
			return fmt.Errorf("excluded: the workspace root cannot be excluded")
		}
		if i > 0 {
			prev := st.Excluded[i-1].Path
			if prev >= x.Path {
				return fmt.Errorf("excluded %q and %q not sorted and unique", string(prev), string(x.Path))
			}
			if Within(x.Path, prev) {
				return fmt.Errorf("excluded %q lies inside excluded %q", string(x.Path), string(prev))
			}
		}
	}
	for i, v := range st.Violations {
		if err := v.Path.Valid(); err != nil {
			return fmt.Errorf("violation: %w", err)
		}
		if v.Rule == "" || strings.IndexByte(v.Rule, 0) >= 0 {
			return fmt.Errorf("violation %q: rule %q is empty or holds NUL", string(v.Path), v.Rule)
		}
		if v.Action != Reverted && v.Action != Blocked {
			return fmt.Errorf("violation %q: unknown action %q", string(v.Path), string(v.Action))
		}
		if i > 0 && st.Violations[i-1].Path >= v.Path {
			return fmt.Errorf("violations %q and %q not sorted and unique", string(st.Violations[i-1].Path), string(v.Path))
		}
	}
	if len(st.Violations) == 0 && st.Applied != nil {
		return fmt.Errorf("applied entries given without violations")
	}
	if st.AppliedCount != uint64(len(st.AppliedEntries())) {
		return fmt.Errorf("applied count %d but %d applied entries", st.AppliedCount, len(st.AppliedEntries()))
	}
	if len(st.AppliedRoot) != 32 {
		return fmt.Errorf("applied root of %d bytes", len(st.AppliedRoot))
	}
	if err := checkOrder(st.Applied); err != nil {
		return fmt.Errorf("applied: %w", err)
	}
	for i := range st.Applied {
		if err := st.Applied[i].Valid(); err != nil {
			return fmt.Errorf("applied: %w", err)
		}
	}
	return nil
}

func excludedToJSON(xs []Excluded) []excludedJSON {
	var out []excludedJSON
	for _, x := range xs {
		out = append(out, excludedJSON(x))
	}
	return out
}

func violationsToJSON(vs []Violation) []violationJSON {
	var out []violationJSON
	for _, v := range vs {
		out = append(out, violationJSON{Path: v.Path, Rule: Bytes(v.Rule), Action: v.Action})
	}
	return out
}

func excludedFromJSON(xs []excludedJSON) []Excluded {
	var out []Excluded
	for _, x := range xs {
		out = append(out, Excluded(x))
	}
	return out
}

func violationsFromJSON(vs []violationJSON) []Violation {
	var out []Violation
	for _, v := range vs {
		out = append(out, Violation{Path: v.Path, Rule: string(v.Rule), Action: v.Action})
	}
	return out
}
