// Package gitconfig reads git's configuration files as git does, far
// enough to find what they name: Parse reads one file's settings, Load
// reads a list of files in order with the files they include.
//
// The format (git-config(1), "CONFIGURATION FILE"): lines of
//
//	[section]                 names: letters, digits, '-' and '.', any case
//	[section "subsection"]    subsection: any bytes but newline and NUL;
//	                          \" and \\ escape, another \x is x
//	key = value               key: a letter, then letters, digits and '-'
//	key                       no '=': the boolean true
//
// A '#' or ';' outside quotes starts a comment. In a value, a '"' opens or
// closes a quoted part, \n \t \b \\ \" are escapes, a '\' ending a line
// continues the value on the next line, and whitespace outside quotes is
// trimmed at both ends and kept (one space per byte) inside. A header may
// have a key on the rest of its line, and a key may come before any
// header (git takes it, with no section). Section and key names are compared
// without case (Parse returns them lower-case), subsections with case;
// the old "[section.sub]" form gives the subsection lower-case. A UTF-8
// byte order mark before the first line is skipped. Anything else is an
// error that names the line, as git's own "bad config line" is.
package gitconfig

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
)

// MaxSize bounds one config file.
const MaxSize = 1 << 20

// An Entry is one setting of a config file.
type Entry struct {
	Section    string // lower-case; "" for a key before any section header
	Subsection string // as written; "" for none
	Key        string // lower-case
	Value      string
	NoValue    bool // "key" alone, without '=': the boolean true
	Line       int  // 1-based
}

// Name is the setting's name as git config prints it: section, subsection
// and key joined by dots, such as "core.hookspath".
func (e Entry) Name() string {
	if e.Section == "" { // a key before any section, which git takes
		return e.Key
	}
	if e.Subsection != "" {
		return e.Section + "." + e.Subsection + "." + e.Key
	}
	return e.Section + "." + e.Key
}

// ErrSyntax is wrapped by the error of a file git would refuse to read.
var ErrSyntax = errors.New("bad config line")

// Parse returns the settings of one config file, in order. It reads at
// most MaxSize bytes of r, and refuses more.
func Parse(r io.Reader) ([]Entry, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSize {
		return nil, fmt.Errorf("config file larger than %d bytes", MaxSize)
	}
	p := &parser{b: bufio.NewReader(bytes.NewReader(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")))), line: 1}
	return p.parse()
}

type parser struct {
	b            *bufio.Reader
	line         int
	section, sub string
	out          []Entry
}

func (p *parser) next() (byte, bool) {
	c, err := p.b.ReadByte()
	if err != nil {
		return 0, false
	}
	if c == '\n' {
		p.line++
	}
	return c, true
}

func (p *parser) bad() error { return fmt.Errorf("%w %d", ErrSyntax, p.line) }

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' }

func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func isAlnum(c byte) bool { return isAlpha(c) || c >= '0' && c <= '9' }

func (p *parser) parse() ([]Entry, error) {
	for {
		c, ok := p.next()
		switch {
		case !ok:
			return p.out, nil
		case c == '\n' || isSpace(c):
		case c == '#' || c == ';':
			p.skipLine()
		case c == '[':
			if err := p.header(); err != nil {
				return nil, err
			}
		case isAlpha(c):
			if err := p.entry(c); err != nil {
				return nil, err
			}
		default:
			return nil, p.bad()
		}
	}
}

func (p *parser) skipLine() {
	for {
		c, ok := p.next()
		if !ok || c == '\n' {
			return
		}
	}
}

// header reads a section header after its '['.
func (p *parser) header() error {
	var name []byte
	for {
		c, ok := p.next()
		switch {
		case !ok || c == '\n':
			return p.bad()
		case c == ']':
			if len(name) == 0 {
				return p.bad()
			}
			// The old form [section.sub]: a lower-case subsection.
			s := strings.ToLower(string(name))
			p.section, p.sub = s, ""
			if i := strings.IndexByte(s, '.'); i >= 0 {
				p.section, p.sub = s[:i], s[i+1:]
			}
			return nil
		case isSpace(c):
			if len(name) == 0 {
				return p.bad()
			}
			return p.subsection(strings.ToLower(string(name)))
		case isAlnum(c) || c == '-' || c == '.':
			name = append(name, c)
		default:
			return p.bad()
		}
	}
}

// subsection reads ` "sub"]` after a section name.
func (p *parser) subsection(section string) error {
	c, ok := p.next()
	for ok && isSpace(c) {
		c, ok = p.next()
	}
	if !ok || c != '"' {
		return p.bad()
	}
	var sub []byte
	for {
		c, ok := p.next()
		switch {
		case !ok || c == '\n' || c == 0:
			return p.bad()
		case c == '"':
			if c, ok := p.next(); !ok || c != ']' {
				return p.bad()
			}
			p.section, p.sub = section, string(sub)
			return nil
		case c == '\\':
			c, ok = p.next()
			if !ok || c == '\n' || c == 0 {
				return p.bad()
			}
			sub = append(sub, c)
		default:
			sub = append(sub, c)
		}
	}
}

// entry reads "key [= value]" whose first byte is c.
func (p *parser) entry(c byte) error {
	e := Entry{Section: p.section, Subsection: p.sub, Line: p.line}
	key := []byte{c}
	for {
		c, ok := p.next()
		if ok && (isAlnum(c) || c == '-') {
			key = append(key, c)
			continue
		}
		e.Key = strings.ToLower(string(key))
		for ok && isSpace(c) {
			c, ok = p.next()
		}
		switch {
		case !ok || c == '\n':
			e.NoValue = true
		case c == '#' || c == ';':
			p.skipLine()
			e.NoValue = true
		case c == '=':
			v, err := p.value(e.Line)
			if err != nil {
				return err
			}
			e.Value = v
		default:
			return p.bad()
		}
		p.out = append(p.out, e)
		return nil
	}
}

// value reads a value after its '=', to the end of its line.
func (p *parser) value(line int) (string, error) {
	var v []byte
	quote, comment, spaces := false, false, 0
	for {
		c, ok := p.next()
		if !ok || c == '\n' {
			if quote {
				return "", fmt.Errorf("%w %d: unterminated quote", ErrSyntax, line)
			}
			return string(v), nil
		}
		if comment {
			continue
		}
		if isSpace(c) && !quote {
			if len(v) > 0 {
				spaces++
			}
			continue
		}
		if !quote && (c == '#' || c == ';') {
			comment = true
			continue
		}
		for ; spaces > 0; spaces-- {
			v = append(v, ' ')
		}
		switch c {
		case '\\':
			c, ok = p.next()
			switch {
			case !ok:
				return "", p.bad()
			case c == '\n':
				continue // a continued line
			case c == 't':
				c = '\t'
			case c == 'b':
				c = '\b'
			case c == 'n':
				c = '\n'
			case c == '\\' || c == '"':
			default:
				return "", p.bad()
			}
			v = append(v, c)
		case '"':
			quote = !quote
		default:
			v = append(v, c)
		}
	}
}
