package policy

import (
	"strings"

	"github.com/layerseal/layerseal/attest"
)

// gitLink is the Builtin glob of a repository's .git. Git follows a .git
// file ("gitdir: PATH"), as worktrees and submodules have, or a symlink, to
// the repository it names: an agent that writes one points the operator's
// git at a config and hooks of its own. A .git directory that stays a
// directory does not break it (its mtime moves with every commit): see
// ChangeViolation.
const gitLink = "**/.git"

// nestedBuiltin reports whether g is one of the Builtin globs for
// repositories at any depth. Unlike other protected globs they do not turn
// exclusions off (every subtree could hold a repository): an excluded
// subtree is counted, not itemized, and one of them in it is not checked.
func nestedBuiltin(g *Glob) bool {
	return strings.HasPrefix(g.text, "**/") && builtinGlob(g.text)
}

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
// are always itemized, so an exclusion yields to them (but for the
// Builtin globs of repositories at any depth).
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
		if g.MayMatchWithin(p) && !nestedBuiltin(g) {
			return false
		}
	}
	return true
}

// Violation returns the protected glob a change at p breaks, or "" when p
// matches no protected glob or an allow covers it.
func (r *Rules) Violation(p attest.Path) string {
	for _, g := range r.Protected {
		if g.Match(p) {
			if r.Allowed(p) {
				return ""
			}
			return g.text
		}
	}
	return ""
}

// Allowed reports whether an --allow of the run covers p: a change there
// breaks no rule, built-in or configured.
func (r *Rules) Allowed(p attest.Path) bool {
	for _, g := range r.Allow {
		if g.Match(p) {
			return true
		}
	}
	return false
}

// Built-in rules a change breaks by what its new state would grant on the
// host once applied, wherever it lies: the workspace is the host's, and a
// root agent's file there runs with the rights it carries, for anyone who
// can reach it.
const (
	RuleSetuid       = "(setuid file)"       // a regular file that runs as its owner
	RuleSetgid       = "(setgid file)"       // a regular file that runs as its group
	RuleCapabilities = "(file capabilities)" // security.capability: runs with capabilities
	RuleDevice       = "(device node)"       // a char or block device: the host's hardware or memory
)

// ChangeViolation is Violation for a change at p from the state old to
// new (nil where absent), with the rules that depend on the states: a .git
// that is a directory before and after breaks no built-in glob, and a new
// state that is a setuid or setgid file, has file capabilities or is a
// device node breaks a built-in rule (RuleSetuid, ...), unless an allow
// covers p.
func (r *Rules) ChangeViolation(p attest.Path, old, new *attest.State) string {
	rule := r.Violation(p)
	if rule == gitLink && dirOrAbsent(old) && dirOrAbsent(new) {
		rule = ""
	}
	if rule == "" && new != nil && !r.Allowed(p) {
		rule = grants(new)
	}
	return rule
}

func dirOrAbsent(s *attest.State) bool { return s == nil || s.Type == attest.Dir }

// grants names the built-in rule a state breaks by what it grants, "" for
// none.
func grants(s *attest.State) string {
	switch {
	case s.Type == attest.CharDev || s.Type == attest.BlockDev:
		return RuleDevice
	case s.Type != attest.File:
		return ""
	case s.Mode&0o4000 != 0:
		return RuleSetuid
	case s.Mode&0o2000 != 0:
		return RuleSetgid
	}
	for _, x := range s.Xattrs {
		if x.Name == "security.capability" {
			return RuleCapabilities
		}
	}
	return ""
}

// UnusedAllows returns the allows that can match no protected path but
// those of the Builtin globs for repositories at any depth (which every
// allow of a subtree meets): most likely a mistake worth a warning.
func (r *Rules) UnusedAllows() []*Glob {
	var out []*Glob
	for _, a := range r.Allow {
		used := false
		for _, g := range r.Protected {
			if a.Overlaps(g) && !nestedBuiltin(g) {
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
