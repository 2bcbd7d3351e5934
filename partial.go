package layerseal

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/policy"
)

// choosePart splits entries (sorted by path) into the part the globs
// choose and the rest: with only, the entries a glob of only matches,
// each with every entry beneath it; with except, all but those. A glob
// that chooses nothing is an error naming it.
//
// For an apply (pull), what a chosen entry needs comes along: each
// directory above it that the change set adds (or turns into a
// directory), as that directory alone. A chosen entry inside a
// directory the agent replaced (removed and made again) cannot be
// applied without the directory and is refused with the reason. For an
// apply and a discard alike, a file chosen apart from another name of
// its inode (State.Link) is refused: both go or neither.
func choosePart(entries []attest.Entry, only, except []string, pull bool) (chosen, rest []attest.Entry, err error) {
	flag, texts := "--only", only
	if len(except) > 0 {
		flag, texts = "--except", except
	}
	if len(only) > 0 && len(except) > 0 {
		return nil, nil, fmt.Errorf("--only and --except do not go together: give one")
	}
	globs := make([]*policy.Glob, len(texts))
	for i, t := range texts {
		g, err := policy.Compile(strings.TrimPrefix(strings.TrimSuffix(t, "/"), "./"))
		if err != nil {
			return nil, nil, fmt.Errorf("%s %q: %w", flag, t, err)
		}
		globs[i] = g
	}
	used := make([]bool, len(globs))
	matched := func(p attest.Path) bool {
		hit := false
		for a := p; ; a = parentPath(a) {
			for i, g := range globs {
				if g.Match(a) {
					used[i], hit = true, true
				}
			}
			if a == attest.Root {
				return hit
			}
		}
	}
	in := make(map[attest.Path]bool)
	for _, e := range entries {
		if matched(e.Path) == (len(only) > 0) {
			in[e.Path] = true
		}
	}
	for i, u := range used {
		if !u {
			return nil, nil, fmt.Errorf("%s %q matches no change still staged (`layerseal diff OUT` lists them)", flag, texts[i])
		}
	}
	byPath := make(map[attest.Path]*attest.Entry, len(entries))
	for i := range entries {
		byPath[entries[i].Path] = &entries[i]
	}
	if pull {
		for _, e := range entries {
			if !in[e.Path] || e.Path == attest.Root {
				continue
			}
			for a := parentPath(e.Path); a != attest.Root; a = parentPath(a) {
				d := byPath[a]
				if d == nil || in[a] {
					continue
				}
				switch {
				case d.Change == attest.Replaced:
					return nil, nil, fmt.Errorf("%q lies inside %q, which the agent replaced (removed and made again): it cannot be applied without the directory; choose the directory too (--only %q)", string(e.Path), string(a), string(a)+"/**")
				case d.New != nil && d.New.Type == attest.Dir && (d.Change == attest.Added || d.Change == attest.TypeChange):
					in[a] = true // the directory alone comes along
				}
			}
		}
	}
	for _, e := range entries {
		if e.New == nil || e.New.Link == "" || e.New.Link == e.Path {
			continue
		}
		if other := byPath[e.New.Link]; other != nil && in[e.Path] != in[e.New.Link] {
			return nil, nil, fmt.Errorf("%q and %q are names of one file (hard links): choose both or neither", string(e.Path), string(e.New.Link))
		}
	}
	for _, e := range entries {
		if in[e.Path] {
			chosen = append(chosen, e)
		} else {
			rest = append(rest, e)
		}
	}
	if len(chosen) == 0 {
		return nil, nil, fmt.Errorf("%s leaves no change to choose", flag)
	}
	return chosen, rest, nil
}

// parentPath is the directory holding p; the root for a top-level path
// (and for the root).
func parentPath(p attest.Path) attest.Path {
	if i := strings.LastIndexByte(string(p), '/'); i >= 0 {
		return p[:i]
	}
	return attest.Root
}

// settled are the entry paths applies and discards of parts settled.
func (s *staged) settled() map[attest.Path]bool {
	if s.j == nil {
		return nil
	}
	m := make(map[attest.Path]bool, len(s.j.Applied)+len(s.j.Discarded))
	for _, p := range s.j.Applied {
		m[p] = true
	}
	for _, p := range s.j.Discarded {
		m[p] = true
	}
	return m
}

// unsettled drops the entries applies and discards of parts settled.
func (s *staged) unsettled(entries []attest.Entry) []attest.Entry {
	settled := s.settled()
	if len(settled) == 0 {
		return entries
	}
	return slices.DeleteFunc(slices.Clone(entries), func(e attest.Entry) bool { return settled[e.Path] })
}

// ours are the directories applies of parts wrote into, with their
// ctime after (journal.Touched).
func (s *staged) ours() map[attest.Path]int64 {
	if s.j == nil || len(s.j.Touched) == 0 {
		return nil
	}
	m := make(map[attest.Path]int64, len(s.j.Touched))
	for _, t := range s.j.Touched {
		m[t.Path] = t.CtimeNS
	}
	return m
}

// touchedBy stats, after an apply of entries, the directories it wrote
// into: each entry's parent and each directory entry.
func touchedBy(ws *os.File, entries []attest.Entry) []touched {
	dirs := make(map[attest.Path]bool)
	for _, e := range entries {
		dirs[parentPath(e.Path)] = true
		if e.New != nil && e.New.Type == attest.Dir {
			dirs[e.Path] = true
		}
	}
	root := int(ws.Fd())
	var out []touched
	for d := range dirs {
		if st, err := statBeneath(root, d); err == nil {
			out = append(out, touched{Path: d, CtimeNS: st.CtimeNS})
		}
	}
	slices.SortFunc(out, func(a, b touched) int { return strings.Compare(string(a.Path), string(b.Path)) })
	return out
}

// DiscardPart drops the part of the staged change set of the session
// out that the globs only choose (see ApplyOptions.Only): those changes
// are never applied, the rest stays staged. When nothing is left staged
// the session is closed as Discard closes it (applied, when parts of it
// were applied before). It returns the number of changes dropped.
func (store *Store) DiscardPart(out string, only []string) (int, error) {
	s, err := store.openStaged(out)
	if err != nil {
		return 0, err
	}
	if store.running(s.rec.ID) {
		return 0, fmt.Errorf("session %s is still running: discard it once it ends", s.rec.ID)
	}
	lock, err := s.lock(store)
	if err != nil {
		return 0, err
	}
	defer lock.release()
	if s.j != nil && s.j.State == journalApplying {
		return 0, fmt.Errorf("session %s: %w; run `layerseal apply %s` to finish it first", s.rec.ID, ErrInterrupted, s.rec.ID)
	}
	entries := s.unsettled(s.st.AppliedEntries())
	chosen, rest, err := choosePart(entries, only, nil, false)
	if err != nil {
		return 0, err
	}
	var j journal
	if s.j != nil {
		j = *s.j
	}
	j.State = journalPartial
	for _, e := range chosen {
		j.Discarded = append(j.Discarded, e.Path)
	}
	if len(rest) == 0 && len(s.st.Excluded) == 0 {
		j.State = journalDiscarded
		if len(j.Applied) > 0 {
			j.State = journalApplied
		}
	}
	if err := s.dir.saveJournal(j, s.env); err != nil {
		return 0, err
	}
	if j.State != journalPartial {
		return len(chosen), s.dir.dropLayers()
	}
	return len(chosen), nil
}
