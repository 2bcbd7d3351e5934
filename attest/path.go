package attest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MarshalText returns the one spelling of p. The text form of Path and
// Bytes (used for them in JSON) spells any byte string in exactly one way:
//
//   - A byte 0x20..0x7E (printable ASCII and space) other than '%' (0x25)
//     appears as itself.
//   - A well-formed UTF-8 sequence of two to four bytes appears as itself,
//     unless it encodes one of these invisible or layout-changing code
//     points: U+0080..U+009F, U+00AD, U+061C, U+180E, U+200B..U+200F,
//     U+2028..U+202E, U+2060..U+206F, U+FEFF, U+FFF9..U+FFFB, U+FFFE,
//     U+FFFF, U+E0000..U+E007F. The list is fixed by this format, not by a
//     Unicode version.
//   - Every other byte — '%', controls 0x00..0x1F (newline included), DEL
//     (0x7F), bytes of ill-formed UTF-8 (overlong forms and surrogates
//     included), and each byte of a listed code point — appears as '%'
//     followed by two UPPERCASE hexadecimal digits.
//
// Decoding refuses lowercase hex, truncated escapes, escapes of bytes that
// must appear as themselves, raw bytes that must be escaped, and NUL, so a
// decoder accepts a text exactly when it is the encoding of the bytes it
// decodes to. The empty byte string is the empty text.
//
// MarshalText fails only when p contains NUL.
func (p Path) MarshalText() ([]byte, error) {
	return marshalText("path", string(p))
}

// UnmarshalText decodes the one spelling of a byte string into p. It checks
// the text format only; call Valid for the rules of a workspace path.
func (p *Path) UnmarshalText(text []byte) error {
	s, err := unmarshalText("path", text)
	if err != nil {
		return err
	}
	*p = Path(s)
	return nil
}

// String returns the text form of p, or its Go quoting if p holds NUL.
func (p Path) String() string {
	if strings.IndexByte(string(p), 0) >= 0 {
		return fmt.Sprintf("%q", string(p))
	}
	return encodeText(string(p))
}

// Valid reports whether p is a workspace path: Root, or non-empty
// components separated by single '/' with no leading or trailing '/', no
// "." or ".." component, and no NUL.
func (p Path) Valid() error {
	if p == Root {
		return nil
	}
	if p == "" {
		return fmt.Errorf("invalid path %q: empty", string(p))
	}
	if strings.IndexByte(string(p), 0) >= 0 {
		return fmt.Errorf("invalid path %q: contains NUL", string(p))
	}
	for c := range strings.SplitSeq(string(p), "/") {
		switch c {
		case "":
			return fmt.Errorf("invalid path %q: empty component or leading or trailing slash", string(p))
		case ".", "..":
			return fmt.Errorf("invalid path %q: %q component", string(p), c)
		}
	}
	return nil
}

// Within reports whether p is dir or lies beneath it. Both are clean
// slash-separated paths of one kind: workspace paths (Path), or absolute
// host paths, where "/" holds every path. It is the one such predicate of
// layerseal.
func Within[P ~string](p, dir P) bool {
	return p == dir || strings.HasPrefix(string(p), strings.TrimSuffix(string(dir), "/")+"/")
}

// Bytes is a byte string without path rules, such as a host path or an
// extended attribute name. Its text form is the one described for Path.
type Bytes string

// MarshalText returns the one spelling of b (see Path.MarshalText). It
// fails only when b contains NUL.
func (b Bytes) MarshalText() ([]byte, error) {
	return marshalText("byte string", string(b))
}

// UnmarshalText decodes the one spelling of a byte string into b.
func (b *Bytes) UnmarshalText(text []byte) error {
	s, err := unmarshalText("byte string", text)
	if err != nil {
		return err
	}
	*b = Bytes(s)
	return nil
}

// String returns the text form of b, or its Go quoting if b holds NUL.
func (b Bytes) String() string { return Path(b).String() }

const upperHex = "0123456789ABCDEF"

// hidden reports whether r, though well-formed, is escaped byte by byte.
func hidden(r rune) bool {
	switch {
	case r >= 0x80 && r <= 0x9F,
		r == 0xAD,
		r == 0x61C,
		r == 0x180E,
		r >= 0x200B && r <= 0x200F,
		r >= 0x2028 && r <= 0x202E,
		r >= 0x2060 && r <= 0x206F,
		r == 0xFEFF,
		r >= 0xFFF9 && r <= 0xFFFB,
		r == 0xFFFE, r == 0xFFFF,
		r >= 0xE0000 && r <= 0xE007F:
		return true
	}
	return false
}

// encodeText returns the text form of s, NUL included (as %00).
func encodeText(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	esc := func(c byte) {
		b.WriteByte('%')
		b.WriteByte(upperHex[c>>4])
		b.WriteByte(upperHex[c&0xF])
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c <= 0x7E && c != '%' {
				b.WriteByte(c)
			} else {
				esc(c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			esc(c)
			i++
			continue
		}
		if hidden(r) {
			for j := range n {
				esc(s[i+j])
			}
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func marshalText(kind, s string) ([]byte, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, fmt.Errorf("encode %s %q: contains NUL", kind, s)
	}
	return []byte(encodeText(s)), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func unmarshalText(kind string, text []byte) (string, error) {
	out := make([]byte, 0, len(text))
	for i := 0; i < len(text); i++ {
		c := text[i]
		if c != '%' {
			out = append(out, c)
			continue
		}
		if i+2 >= len(text) {
			return "", fmt.Errorf("decode %s %q: truncated escape", kind, text)
		}
		hi, ok1 := unhex(text[i+1])
		lo, ok2 := unhex(text[i+2])
		if !ok1 || !ok2 {
			return "", fmt.Errorf("decode %s %q: escape %q is not two uppercase hex digits", kind, text, text[i:i+3])
		}
		out = append(out, hi<<4|lo)
		i += 2
	}
	if bytes.IndexByte(out, 0) >= 0 {
		return "", fmt.Errorf("decode %s %q: contains NUL", kind, text)
	}
	s := string(out)
	if encodeText(s) != string(text) {
		return "", fmt.Errorf("decode %s %q: %w", kind, text, errNotCanonicalText)
	}
	return s, nil
}

var errNotCanonicalText = errors.New("not the one spelling: a byte is escaped that must appear as itself, or appears as itself but must be escaped")
