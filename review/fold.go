package review

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/layerseal/layerseal/attest"
)

// Line is one line of a folded listing: an entry, or a directory added
// or deleted with everything beneath it, folded into one line.
type Line struct {
	Entry attest.Entry // the entry, or the folded directory's own
	// Folded counts the entries beneath a folded directory (0: not
	// folded).
	Folded int
}

// Fold folds each topmost directory that was added or deleted, and
// whose every entry beneath is a change of the same kind, into one line;
// everything else is a line of its own, in the order of entries (sorted
// by path). It costs one map update per entry and ancestor.
func Fold(entries []attest.Entry) []Line {
	type dir struct {
		n     int
		mixed bool
		kind  attest.Change
	}
	dirs := make(map[attest.Path]*dir)
	for _, e := range entries {
		for a := parent(e.Path); a != ""; a = parent(a) {
			d := dirs[a]
			if d == nil {
				d = &dir{kind: e.Change}
				dirs[a] = d
			}
			d.n++
			if d.kind != e.Change {
				d.mixed = true
			}
		}
	}
	folds := func(e attest.Entry) bool {
		if e.Change != attest.Added && e.Change != attest.Deleted {
			return false
		}
		d := dirs[e.Path]
		return d != nil && !d.mixed && d.kind == e.Change
	}
	folded := make(map[attest.Path]bool)
	for _, e := range entries {
		if folds(e) {
			folded[e.Path] = true
		}
	}
	var out []Line
	for _, e := range entries {
		if underFolded(e.Path, folded) {
			continue
		}
		l := Line{Entry: e}
		if folded[e.Path] {
			l.Folded = dirs[e.Path].n
		}
		out = append(out, l)
	}
	return out
}

// underFolded reports whether an ancestor of p is folded.
func underFolded(p attest.Path, folded map[attest.Path]bool) bool {
	for a := parent(p); a != ""; a = parent(a) {
		if folded[a] {
			return true
		}
	}
	return false
}

// parent is the directory holding p, "" for a top-level path and the
// root.
func parent(p attest.Path) attest.Path {
	i := strings.LastIndexByte(string(p), '/')
	if i < 0 {
		return ""
	}
	return p[:i]
}

// Group is one line of a summary: a directory's changes counted by kind.
type Group struct {
	Dir    attest.Path // the directory holding the changes; "." for the root
	Folded bool        // a directory added or deleted with all beneath it
	Counts map[attest.Change]int
}

// Summarize groups the lines of Fold(entries) by the directory holding
// them, except that a folded directory is a group of its own, counting
// itself and what lies beneath it; groups are in path order.
func Summarize(lines []Line) []Group {
	byDir := make(map[attest.Path]*Group)
	var keys []attest.Path
	for _, l := range lines {
		key, n := parent(l.Entry.Path), 1
		if key == "" {
			key = attest.Root
		}
		if l.Folded > 0 {
			key, n = l.Entry.Path+"/", l.Folded+1
		}
		g := byDir[key]
		if g == nil {
			g = &Group{Dir: key, Folded: l.Folded > 0, Counts: make(map[attest.Change]int)}
			byDir[key] = g
			keys = append(keys, key)
		}
		g.Counts[l.Entry.Change] += n
	}
	slices.Sort(keys)
	out := make([]Group, len(keys))
	for i, k := range keys {
		out[i] = *byDir[k]
	}
	return out
}

// summaryKinds are the summary's columns.
var summaryKinds = []attest.Change{attest.Added, attest.Modified, attest.Metadata, attest.Deleted, attest.Replaced, attest.TypeChange}

// WriteSummary writes one line per group: its counts under the headings
// added, modified, metadata, deleted, replaced, typechange, then the
// directory in its text form (a folded one ends in "/" and says "all
// added" or "all deleted"), and a total line.
func WriteSummary(w io.Writer, groups []Group) error {
	var b strings.Builder
	total := make(map[attest.Change]int)
	for _, k := range summaryKinds {
		fmt.Fprintf(&b, "%10s ", k)
	}
	b.WriteString(" directory\n")
	for _, g := range groups {
		for _, k := range summaryKinds {
			fmt.Fprintf(&b, "%10d ", g.Counts[k])
			total[k] += g.Counts[k]
		}
		note := ""
		if g.Folded {
			for k := range g.Counts {
				note = " (all " + string(k) + ")"
			}
		}
		fmt.Fprintf(&b, " %s%s\n", g.Dir, note)
	}
	n := 0
	for _, k := range summaryKinds {
		fmt.Fprintf(&b, "%10d ", total[k])
		n += total[k]
	}
	fmt.Fprintf(&b, " %d change(s) in %d group(s)\n", n, len(groups))
	_, err := io.WriteString(w, b.String())
	return err
}
