package main

import (
	"io"
	"strings"
	"unicode/utf8"

	"github.com/layerseal/layerseal/attest"
)

// printable returns a diagnostic with every byte a terminal could act on
// escaped as paths are (attest's text codec: %XX for control bytes,
// invalid UTF-8 and invisible characters), line by line. '%' stays as it
// is, so paths already in their text form read the same. Messages quote
// agent-chosen names (file names in error text, mount points, reason
// details): none of them can print raw escapes.
func printable(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '\n' || r == '%':
			b.WriteString(s[i : i+n])
		default:
			b.WriteString(attest.Bytes(s[i : i+n]).String())
		}
		i += n
	}
	return b.String()
}

// escapingWriter passes what is written through printable.
type escapingWriter struct{ w io.Writer }

func (e escapingWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(e.w, printable(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
