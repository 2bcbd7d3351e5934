package layerseal

import (
	"strings"
	"testing"

	"github.com/layerseal/layerseal/attest"
)

func partEntry(p string, c attest.Change, t attest.Type) attest.Entry {
	e := attest.Entry{Path: attest.Path(p), Change: c}
	if c != attest.Deleted {
		e.New = &attest.State{Type: t}
	}
	if c != attest.Added {
		e.Old = &attest.State{Type: t}
	}
	return e
}

// TestChoosePart: globs take what lies beneath a matched directory; an
// apply brings the added directories a chosen path needs, alone; a path
// inside a replaced directory and half a hard-link pair are refused; a
// glob that chooses nothing is named.
func TestChoosePart(t *testing.T) {
	linked := partEntry("b", attest.Added, attest.File)
	linked.New.Link = "a"
	entries := []attest.Entry{
		partEntry("a", attest.Added, attest.File),
		linked,
		partEntry("new", attest.Added, attest.Dir),
		partEntry("new/deep", attest.Added, attest.Dir),
		partEntry("new/deep/f", attest.Added, attest.File),
		partEntry("new/g", attest.Added, attest.File),
		partEntry("rep", attest.Replaced, attest.Dir),
		partEntry("rep/x", attest.Added, attest.File),
		partEntry("src/m", attest.Modified, attest.File),
	}
	paths := func(es []attest.Entry) string {
		var s []string
		for _, e := range es {
			s = append(s, string(e.Path))
		}
		return strings.Join(s, " ")
	}
	for _, c := range []struct {
		only, except []string
		pull         bool
		chosen, err  string
	}{
		{only: []string{"new/deep/*"}, pull: true, chosen: "new new/deep new/deep/f"},
		{only: []string{"new/deep/*"}, chosen: "new/deep/f"},
		{only: []string{"new"}, pull: true, chosen: "new new/deep new/deep/f new/g"},
		{except: []string{"new", "rep", "a", "b"}, pull: true, chosen: "src/m"},
		{only: []string{"rep/x"}, pull: true, err: `"rep/x" lies inside "rep", which the agent replaced`},
		{only: []string{"rep/x"}, chosen: "rep/x"},
		{only: []string{"a"}, pull: true, err: `"b" and "a" are names of one file`},
		{only: []string{"src/*", "nothing/**"}, err: `--only "nothing/**" matches no change still staged`},
		{only: []string{"a"}, except: []string{"b"}, err: "--only and --except do not go together"},
	} {
		chosen, _, err := choosePart(entries, c.only, c.except, c.pull)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("only %v except %v: error %v, want %q", c.only, c.except, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("only %v except %v: %v", c.only, c.except, err)
		case c.err == "" && paths(chosen) != c.chosen:
			t.Errorf("only %v except %v pull %v: chose %q, want %q", c.only, c.except, c.pull, paths(chosen), c.chosen)
		}
	}
}
