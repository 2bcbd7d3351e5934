package review

import (
	"fmt"
	"strings"
	"testing"
)

func TestHidingAttributes(t *testing.T) {
	old := "*.go diff=golang\n*.png binary\n"
	new := strings.Join([]string{
		"# *.c -diff",               // a comment
		"*.go diff=golang",          // there before
		"*.png   binary",            // changed (its blanks): named
		"*.sh -diff",                // hides
		"*.txt text eol=lf",         // hides nothing
		"*.md -text",                // hides nothing: git diff still looks at the bytes
		"*.py !diff",                // back to the default
		"*.bin binary",              // hides
		"*.js diff=foo",             // a driver
		"*.lock filter=lfs",         // a filter
		"gen/** linguist-generated", // GitHub folds it
		"[attr]quiet -diff -merge",  // a macro that hides
		"*.rb quiet",                // its use
		`"a b.sh" -diff`,            // a quoted pattern
		"",
	}, "\n")
	var got []string
	for _, n := range HidingAttributes([]byte(old), []byte(new)) {
		got = append(got, n.Line)
	}
	want := []string{"*.png   binary", "*.sh -diff", "*.bin binary", "*.js diff=foo", "*.lock filter=lfs", "gen/** linguist-generated",
		"[attr]quiet -diff -merge", "*.rb quiet", `"a b.sh" -diff`}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("lines named:\n%q\nwant\n%q", got, want)
	}
	if n := HidingAttributes([]byte(new), []byte(new)); n != nil {
		t.Errorf("unchanged contents: %v", n)
	}
	var many strings.Builder
	for i := range MaxAttributeNotes + 5 {
		fmt.Fprintf(&many, "*.x%d -diff\n", i)
	}
	n := HidingAttributes(nil, []byte(many.String()))
	if len(n) != MaxAttributeNotes+1 || n[MaxAttributeNotes].Effect != "and 5 more line(s) like these" {
		t.Errorf("%d notes, last %+v", len(n), n[len(n)-1])
	}
	long := strings.Repeat("x", 300) + " -diff"
	if n := HidingAttributes(nil, []byte(long)); len(n) != 1 || len(n[0].Line) != maxNoteLine+3 {
		t.Errorf("a long line: %+v", n)
	}
}
