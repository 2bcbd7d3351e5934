package layerseal

import (
	"fmt"
	"slices"
	"strings"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/overlay"
)

// sweep finds every observed change on a protected path that no allow
// covers, reverts it in the upper layer (overlay.Revert), and reads the
// swept upper layer again (reader.reread): st gets Violations and, when
// there are any, Applied, the change set that is left. A violation is
// "reverted" only when the path is absent from the re-read change set,
// "blocked" otherwise. When it read the layer again it returns the
// entries of st's excluded subtrees that read found (nil otherwise). The
// upper layer must not be mounted.
func sweep(r *reader, st *attest.Statement) (*subtrees, error) {
	rules := r.rules
	var vs []attest.Violation
	for _, e := range st.Entries {
		if rule := rules.ChangeViolation(e.Path, e.Old, e.New); rule != "" {
			vs = append(vs, attest.Violation{Path: e.Path, Rule: rule})
		}
	}
	aliases, err := aliasViolations(r, st.Entries)
	if err != nil {
		return nil, err
	}
	vs = append(vs, aliases...)
	vs = append(vs, repoViolations(r, st.Entries)...)
	grants, err := grantViolations(r, st.Entries)
	if err != nil {
		return nil, err
	}
	vs = append(vs, grants...)
	index, err := gitIndexViolations(r, st.Entries)
	if err != nil {
		return nil, err
	}
	vs = append(vs, index...)
	slices.SortStableFunc(vs, func(a, b attest.Violation) int { return strings.Compare(string(a.Path), string(b.Path)) })
	vs = slices.CompactFunc(vs, func(a, b attest.Violation) bool { return a.Path == b.Path })
	if len(vs) == 0 {
		return nil, nil
	}
	failed := map[attest.Path]error{}
	for _, v := range vs {
		// A path inside one already reverted with its subtree is
		// reverted again, which changes nothing or finishes the job.
		if err := overlay.Revert(r.upper, r.lower, v.Path, overlay.RevertOptions{LowerDir: r.lowerDir}); err != nil {
			failed[v.Path] = err
		}
	}
	after, excluded, err := r.reread(st)
	if err != nil {
		return nil, fmt.Errorf("read the swept upper layer: %w", err)
	}
	left := map[attest.Path]bool{}
	for _, e := range after {
		left[e.Path] = true
	}
	for i := range vs {
		vs[i].Action = attest.Reverted
		if left[vs[i].Path] || failed[vs[i].Path] != nil {
			vs[i].Action = attest.Blocked
		}
	}
	st.Violations = vs
	st.Applied = after
	if st.Applied == nil {
		st.Applied = []attest.Entry{}
	}
	return &subtrees{entries: excluded}, nil
}

// aliasViolations finds the listed names that become hard links to an
// inode that also has a protected name (in the upper layer, or through
// the lower links of an unchanged file they link to): through such a
// name the agent, or anyone later, changes the protected file. Each is
// a violation of the protected name's rule.
func aliasViolations(r *reader, entries []attest.Entry) ([]attest.Violation, error) {
	listed := map[attest.Path]bool{}
	members := map[attest.Path][]attest.Path{} // anchor → listed names linked to it
	var anchors []attest.Path
	for _, e := range entries {
		listed[e.Path] = true
		if e.New == nil || e.New.Link == "" {
			continue
		}
		if _, ok := members[e.New.Link]; !ok {
			anchors = append(anchors, e.New.Link)
		}
		members[e.New.Link] = append(members[e.New.Link], e.Path)
	}
	if len(anchors) == 0 {
		return nil, nil
	}
	names, err := overlay.Aliases(r.upper, r.lower, r.lowerDir, anchors, func(p attest.Path) bool { return !listed[p] })
	if err != nil {
		return nil, fmt.Errorf("find the names of hard-linked files: %w", err)
	}
	var out []attest.Violation
	for _, a := range anchors {
		rule := ""
		for _, n := range names[a] {
			if rule = r.rules.Violation(n); rule != "" {
				break
			}
		}
		if rule == "" {
			continue
		}
		for _, m := range members[a] {
			if r.rules.Violation(m) == "" {
				out = append(out, attest.Violation{Path: m, Rule: rule})
			}
		}
	}
	return out, nil
}

// blocked lists the violations the sweep could not revert.
func blocked(st *attest.Statement) []string {
	var out []string
	for _, v := range st.Violations {
		if v.Action == attest.Blocked {
			out = append(out, fmt.Sprintf("%q (rule %q)", string(v.Path), v.Rule))
		}
	}
	return out
}

// GitChanges counts the entries of st's change set after the sweep that
// lie in the workspace's .git when the sweep found violations, and is 0
// otherwise: a commit the agent made can carry a protected file's content
// into the repository although the sweep reverted the file itself.
func GitChanges(st *attest.Statement) int {
	if len(st.Violations) == 0 {
		return 0
	}
	n := 0
	for _, e := range st.AppliedEntries() {
		// The .git directory's own mtime moves with whatever was made in
		// it, reverted protected files included: that says nothing of a
		// commit.
		if attest.Within(e.Path, ".git") && !(e.Path == ".git" && e.Change == attest.Metadata) {
			n++
		}
	}
	return n
}
