package review

import (
	"bytes"
	"fmt"
	"strings"
)

// AttributesFile is the name of the files in which git looks up the
// attributes of the paths in and beneath their directory.
const AttributesFile = ".gitattributes"

// MaxAttributeNotes is the most notes HidingAttributes returns for one
// file; the last says how many more lines there were.
const MaxAttributeNotes = 16

// maxNoteLine is the most bytes of a line a note quotes.
const maxNoteLine = 200

// HidingAttributes returns a note for each line of a .gitattributes file's
// new contents, not in its old contents (nil for a new file), that
// changes what git diff or a review shows of the files it matches (see
// gitattributes(5)):
//
//   - "-diff" or "binary" (the macro for -diff -merge -text): git diff
//     prints "Binary files differ", no line of the change;
//   - "diff=DRIVER": git diff shows the files through the driver's
//     textconv or external command;
//   - "filter=DRIVER": git status and git diff see the files through the
//     driver's clean command;
//   - "linguist-generated": GitHub folds the files' diffs away;
//   - a use of a macro ("[attr]NAME ...") the new contents define with
//     one of these.
//
// "-text" is not named: it stops end-of-line conversion, and git diff
// still decides by the contents whether they are text. Each note is the
// line, trimmed and cut to 200 bytes, and what it does.
func HidingAttributes(old, new []byte) []AttributeNote {
	had := make(map[string]bool)
	for _, l := range bytes.Split(old, []byte("\n")) {
		had[strings.TrimSpace(string(l))] = true
	}
	lines := bytes.Split(new, []byte("\n"))
	// Macros defined with a hiding attribute, by name.
	macros := make(map[string]string)
	for _, l := range lines {
		pattern, attrs := splitAttributes(string(l))
		if name, ok := strings.CutPrefix(pattern, "[attr]"); ok {
			if why := hides(attrs, nil); why != "" {
				macros[name] = why
			}
		}
	}
	var out []AttributeNote
	more := 0
	for _, l := range lines {
		line := strings.TrimSpace(string(l))
		if had[line] {
			continue
		}
		_, attrs := splitAttributes(line)
		why := hides(attrs, macros)
		if why == "" {
			continue
		}
		if len(out) == MaxAttributeNotes {
			more++
			continue
		}
		if len(line) > maxNoteLine {
			line = line[:maxNoteLine] + "..."
		}
		out = append(out, AttributeNote{Line: line, Effect: why})
	}
	if more > 0 {
		out = append(out, AttributeNote{Effect: fmt.Sprintf("and %d more line(s) like these", more)})
	}
	return out
}

// AttributeNote is one line of a .gitattributes file and what it hides.
type AttributeNote struct {
	Line   string // the line, trimmed; "" for the count of lines left out
	Effect string // what git (or a review) then shows of the matching files
}

// splitAttributes splits a gitattributes line into its pattern and its
// attributes; a comment or blank line has neither.
func splitAttributes(line string) (string, []string) {
	line = strings.TrimLeft(line, " \t\r")
	if line == "" || line[0] == '#' {
		return "", nil
	}
	var pattern string
	if line[0] == '"' {
		// A C-style quoted pattern.
		i := 1
		for i < len(line) && line[i] != '"' {
			if line[i] == '\\' {
				i++
			}
			i++
		}
		if i >= len(line) {
			return "", nil
		}
		pattern, line = line[:i+1], line[i+1:]
	} else {
		end := strings.IndexAny(line, " \t\r")
		if end < 0 {
			return line, nil
		}
		pattern, line = line[:end], line[end:]
	}
	return pattern, strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' || r == '\r' })
}

// hides says what the attributes do to a review, "" for nothing hidden.
func hides(attrs []string, macros map[string]string) string {
	for _, a := range attrs {
		name, value, set := strings.Cut(a, "=")
		switch {
		case a == "-diff":
			return "hides changes to matching files from git diff (shown as binary)"
		case a == "binary":
			return "marks matching files binary: git diff shows none of their lines"
		case set && name == "diff":
			return fmt.Sprintf("shows matching files in git diff through the diff driver %q", value)
		case set && name == "filter":
			return fmt.Sprintf("makes git status and git diff see matching files through the filter %q", value)
		case name == "linguist-generated" && (!set || value == "true"):
			return "folds matching files' diffs away on GitHub (generated)"
		case macros[a] != "":
			return fmt.Sprintf("uses the macro %q, which %s", a, macros[a])
		}
	}
	return ""
}
