package review

import (
	"bytes"
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/layerseal/layerseal/attest"
)

func entry(p string, c attest.Change, t attest.Type) attest.Entry {
	e := attest.Entry{Path: attest.Path(p), Change: c}
	s := &attest.State{Type: t}
	switch c {
	case attest.Added:
		e.New = s
	case attest.Deleted:
		e.Old = s
	default:
		e.Old, e.New = &attest.State{Type: t}, s
	}
	return e
}

// TestFold: a directory added or deleted with all beneath it is one
// line, the topmost one; a directory with mixed changes beneath, or
// merely holding changes, is not folded; byte order ("a-x" sorts between
// "a" and "a/b") does not split a folded directory.
func TestFold(t *testing.T) {
	entries := []attest.Entry{
		entry(".", attest.Metadata, attest.Dir),
		entry("a", attest.Added, attest.Dir),
		entry("a-x", attest.Modified, attest.File),
		entry("a/b", attest.Added, attest.Dir),
		entry("a/b/c", attest.Added, attest.File),
		entry("a/d", attest.Added, attest.File),
		entry("gone", attest.Deleted, attest.Dir),
		entry("gone/f", attest.Deleted, attest.File),
		entry("mixed", attest.Added, attest.Dir),
		entry("mixed/f", attest.Added, attest.File),
		entry("mixed/g", attest.Deleted, attest.File),
		entry("src/new.go", attest.Added, attest.File),
	}
	var got []string
	for _, l := range Fold(entries) {
		got = append(got, string(l.Entry.Path)+":"+strings.Repeat("+", l.Folded))
	}
	want := ".: a:+++ a-x: gone:+ mixed: mixed/f: mixed/g: src/new.go:"
	if strings.Join(got, " ") != want {
		t.Errorf("Fold: %s\nwant   %s", strings.Join(got, " "), want)
	}
	var b bytes.Buffer
	WriteSummary(&b, Summarize(Fold(entries)))
	for _, line := range []string{
		"         1          1          1          0          0          0  .\n",
		"         4          0          0          0          0          0  a/ (all added)\n",
		"         0          0          0          2          0          0  gone/ (all deleted)\n",
		"         1          0          0          1          0          0  mixed\n",
		"         1          0          0          0          0          0  src\n",
		"         7          1          1          3          0          0  12 change(s) in 5 group(s)\n",
	} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("summary lacks %q:\n%s", line, b.String())
		}
	}
}

// TestRenames: a deletion and an addition of the same bytes pair up,
// once each; a digest is asked only for deletions of a size some
// addition has; other sizes and digests stay apart.
func TestRenames(t *testing.T) {
	sum := func(s string) []byte { d := sha256.Sum256([]byte(s)); return d[:] }
	add := func(p, data string) attest.Entry {
		return attest.Entry{Path: attest.Path(p), Change: attest.Added, New: &attest.State{Type: attest.File, Size: uint64(len(data)), SHA256: sum(data)}}
	}
	del := func(p, data string) attest.Entry {
		return attest.Entry{Path: attest.Path(p), Change: attest.Deleted, Old: &attest.State{Type: attest.File, Size: uint64(len(data))}}
	}
	old := map[attest.Path]string{"a": "same", "b": "same", "c": "other", "d": "a longer file"}
	entries := []attest.Entry{del("a", "same"), del("b", "same"), del("c", "other"), del("d", "a longer file"), add("x", "same"), add("y", "diffr"), add("z", "same")}
	asked := map[attest.Path]bool{}
	got := Renames(entries, func(e attest.Entry) []byte { asked[e.Path] = true; return sum(old[e.Path]) })
	if len(got) != 2 || got[0] != (Rename{"a", "x"}) || got[1] != (Rename{"b", "z"}) {
		t.Errorf("Renames: %v", got)
	}
	if asked["d"] {
		t.Errorf("a digest was read for a deletion of a size no addition has")
	}
}
