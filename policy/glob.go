package policy

import (
	"fmt"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/layerseal/layerseal/attest"
)

// Glob is a compiled workspace glob. A glob is anchored at the workspace
// root and matched against an attest.Path component by component:
//
//   - "*" matches any run of bytes within one component, "?" one
//     character, "[abc]", "[a-z]" and "[^a-z]" one character of a class,
//     and "\x" the character x itself (as path.Match reads them);
//   - "**" as a whole component matches zero or more components, so
//     "deploy/**" matches deploy itself and everything beneath it, and
//     "**/.env" matches .env in every directory;
//   - "." alone matches the workspace root.
//
// Names beginning with "." are matched like any other name.
type Glob struct {
	text  string
	comps []string // "**" for a doublestar component
}

// String returns the glob as written.
func (g *Glob) String() string { return g.text }

// Compile parses a glob, refusing one that can never match a workspace
// path: empty, absolute, with an empty, "." or ".." component, a NUL byte,
// a malformed or empty character class, or "**" inside a component.
func Compile(text string) (*Glob, error) {
	g := &Glob{text: text}
	if text == "." {
		return g, nil
	}
	switch {
	case text == "":
		return nil, fmt.Errorf("glob %q is empty", text)
	case strings.IndexByte(text, 0) >= 0:
		return nil, fmt.Errorf("glob %q holds NUL: it can never match", text)
	case strings.HasPrefix(text, "/"):
		return nil, fmt.Errorf("glob %q is absolute: globs are relative to the workspace root", text)
	}
	// A trailing slash names a directory as a path does: "a/" is "a",
	// and is kept (and recorded) as "a".
	if t := strings.TrimSuffix(text, "/"); t != "" {
		text = t
		g.text = t
	}
	for _, c := range strings.Split(text, "/") {
		switch {
		case c == "":
			return nil, fmt.Errorf("glob %q has an empty component: it can never match", text)
		case c == "." || c == "..":
			return nil, fmt.Errorf("glob %q has a %q component: it can never match", text, c)
		case c == "**":
		case strings.Contains(c, "**"):
			return nil, fmt.Errorf("glob %q: \"**\" must be a whole component", text)
		default:
			if err := checkComponent(c); err != nil {
				return nil, fmt.Errorf("glob %q: %w", text, err)
			}
		}
		g.comps = append(g.comps, c)
	}
	return g, nil
}

// checkComponent refuses a malformed component pattern and character
// classes that hold no character (an inverted range such as "[z-a]").
func checkComponent(c string) error {
	if _, err := path.Match(c, ""); err != nil {
		return fmt.Errorf("component %q is malformed", c)
	}
	for i := 0; i < len(c); i++ {
		switch c[i] {
		case '\\':
			i++
		case '[':
			end, empty := classEnd(c, i+1)
			if empty {
				return fmt.Errorf("character class in %q matches nothing", c)
			}
			i = end
		}
	}
	return nil
}

// classEnd scans a class body from i (just past '[') and returns the index
// of its closing ']' and whether the class is unsatisfiable: every range
// inverted (and not negated).
func classEnd(c string, i int) (int, bool) {
	negated := i < len(c) && c[i] == '^'
	if negated {
		i++
	}
	some := false
	for i < len(c) && c[i] != ']' {
		lo, n := classChar(c, i)
		i += n
		hi := lo
		if i+1 < len(c) && c[i] == '-' && c[i+1] != ']' {
			hi, n = classChar(c, i+1)
			i += 1 + n
		}
		if lo <= hi {
			some = true
		}
	}
	return i, !some && !negated
}

func classChar(c string, i int) (rune, int) {
	if c[i] == '\\' && i+1 < len(c) {
		r, n := utf8.DecodeRuneInString(c[i+1:])
		return r, n + 1
	}
	return utf8.DecodeRuneInString(c[i:])
}

// components splits a path; the root has none.
func components(p attest.Path) []string {
	if p == attest.Root || p == "" {
		return nil
	}
	return strings.Split(string(p), "/")
}

// Match reports whether p matches the glob.
func (g *Glob) Match(p attest.Path) bool {
	if g.text == "." {
		return p == attest.Root
	}
	return match(g.comps, components(p), false)
}

// MayMatchWithin reports whether the glob could match dir or some path
// beneath it: false means no path in dir's subtree can match.
func (g *Glob) MayMatchWithin(dir attest.Path) bool {
	if g.text == "." {
		return dir == attest.Root
	}
	return match(g.comps, components(dir), true)
}

// match matches pattern components against path components. With prefix,
// running out of path components is a match (something deeper may match).
func match(pat, comps []string, prefix bool) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(comps); i++ {
				if match(pat[1:], comps[i:], prefix) {
					return true
				}
			}
			return false
		}
		if len(comps) == 0 {
			return prefix
		}
		if ok, _ := path.Match(pat[0], comps[0]); !ok {
			return false
		}
		pat, comps = pat[1:], comps[1:]
	}
	return len(comps) == 0
}

// Overlaps reports whether some path may match both globs. It errs on the
// side of true: two wildcard components are assumed to overlap.
func (g *Glob) Overlaps(h *Glob) bool {
	if g.text == "." || h.text == "." {
		return g.Match(attest.Root) && h.Match(attest.Root)
	}
	return overlap(g.comps, h.comps)
}

func overlap(a, b []string) bool {
	switch {
	case len(a) == 0 && len(b) == 0:
		return true
	case len(a) > 0 && a[0] == "**":
		if overlap(a[1:], b) {
			return true
		}
		return len(b) > 0 && overlap(a, b[1:])
	case len(b) > 0 && b[0] == "**":
		return overlap(b, a)
	case len(a) == 0 || len(b) == 0:
		return false
	}
	if !componentsOverlap(a[0], b[0]) {
		return false
	}
	return overlap(a[1:], b[1:])
}

// componentsOverlap reports whether two component patterns may match one
// name: exactly when one is a literal the other matches, or both have
// wildcards.
func componentsOverlap(x, y string) bool {
	lx, ly := literal(x), literal(y)
	switch {
	case lx && ly:
		return unescape(x) == unescape(y)
	case lx:
		ok, _ := path.Match(y, unescape(x))
		return ok
	case ly:
		ok, _ := path.Match(x, unescape(y))
		return ok
	}
	return true
}

func literal(c string) bool { return !strings.ContainsAny(c, "*?[") }

func unescape(c string) string {
	if !strings.Contains(c, "\\") {
		return c
	}
	var b strings.Builder
	for i := 0; i < len(c); i++ {
		if c[i] == '\\' && i+1 < len(c) {
			i++
		}
		b.WriteByte(c[i])
	}
	return b.String()
}
