package layerseal

import (
	"strings"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/overlay"
	"github.com/layerseal/layerseal/policy"
)

// repoViolations returns the entries that break policy.RuleGitRepository
// and that no allow covers:
//
//   - an entry named .git that is added or changed, but for a directory
//     before and after (its mtime moves with every commit);
//   - an entry that gives its directory git's repository layout
//     (overlay.GitLayoutName) where the lower layer's has none: reverting
//     those undoes the repository and leaves the agent's other work in
//     the directory;
//   - an entry beneath a directory git takes for a repository before or
//     after the change (one named .git, or with the layout) through one of
//     its entries git runs commands through (overlay.GitControlName).
//
// It looks at a directory only when an entry's name asks for it, once per
// directory, in the upper layer over the lower. Where it cannot look (the
// layers do not open, a lookup fails) it takes the directory for a new
// repository: a violation, never a pass.
func repoViolations(r *reader, entries []attest.Entry) []attest.Violation {
	var view *overlay.View
	viewErr := false
	gitDir := func(d attest.Path) (before, after bool) {
		if view == nil && !viewErr {
			v, err := overlay.OpenView(r.upper, r.lower, r.lowerDir, "")
			if err != nil {
				viewErr = true
			} else {
				view = v
			}
		}
		if viewErr {
			return false, true
		}
		return view.GitDir(d)
	}
	defer func() {
		if view != nil {
			view.Close()
		}
	}()
	var out []attest.Violation
	for _, e := range entries {
		if r.rules.Allowed(e.Path) {
			continue
		}
		if repoChange(e, gitDir) {
			out = append(out, attest.Violation{Path: e.Path, Rule: policy.RuleGitRepository})
		}
	}
	return out
}

// repoChange reports whether e breaks policy.RuleGitRepository (see
// repoViolations), asking gitDir whether a directory has git's repository
// layout before and after the change.
func repoChange(e attest.Entry, gitDir func(attest.Path) (before, after bool)) bool {
	comps := strings.Split(string(e.Path), "/")
	last := len(comps) - 1
	if comps[last] == ".git" && e.New != nil && (e.Old == nil || e.Old.Type != attest.Dir || e.New.Type != attest.Dir) {
		return true
	}
	for i, c := range comps {
		layout, control := i == last && overlay.GitLayoutName(c), overlay.GitControlName(c)
		if !layout && !control {
			continue
		}
		if control && i > 0 && comps[i-1] == ".git" {
			return true
		}
		dir := attest.Root
		if i > 0 {
			dir = attest.Path(strings.Join(comps[:i], "/"))
		}
		before, after := gitDir(dir)
		if layout && after && !before || control && (before || after) {
			return true
		}
	}
	return false
}
