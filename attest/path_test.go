package attest

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestPathTextEncode(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{".", "."},
		{"src/main.go", "src/main.go"},
		{"a b~!\"#$&'()*+,-./:;<=>?@[\\]^_`{|}", "a b~!\"#$&'()*+,-./:;<=>?@[\\]^_`{|}"},
		{"100%", "100%25"},
		{"new\nline", "new%0Aline"},
		{"tab\tcr\r", "tab%09cr%0D"},
		{"\x01\x1f\x7f", "%01%1F%7F"},
		{"bad\xff\xfe", "bad%FF%FE"},
		{"ünïcode/ファイル😀", "ünïcode/ファイル😀"},
		{"\u00e9", "é"},
		{"e\u0301", "e\u0301"},                  // combining accent stays
		{"\xc3", "%C3"},                         // truncated sequence
		{"\xc0\xaf", "%C0%AF"},                  // overlong '/'
		{"\xed\xa0\x80", "%ED%A0%80"},           // surrogate
		{"\u0085", "%C2%85"},                    // C1 control NEL
		{"\u009f", "%C2%9F"},                    // C1 control
		{"\u00a0", "\u00a0"},                    // no-break space stays
		{"\u00ad", "%C2%AD"},                    // soft hyphen
		{"a\u202eexe.txt", "a%E2%80%AEexe.txt"}, // right-to-left override
		{"\u2028\u2029", "%E2%80%A8%E2%80%A9"},
		{"\u200b\u200d", "%E2%80%8B%E2%80%8D"},
		{"\u2066x\u2069", "%E2%81%A6x%E2%81%A9"},
		{"\ufeff", "%EF%BB%BF"},
		{"\ufffd", "\ufffd"}, // a literal replacement character stays
		{"\uffff", "%EF%BF%BF"},
		{"\U000E0041", "%F3%A0%81%81"}, // tag character
		{"\U0010FFFF", "\U0010FFFF"},
	}
	for _, tt := range tests {
		got, err := Path(tt.in).MarshalText()
		if err != nil {
			t.Errorf("MarshalText(%q): %v", tt.in, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("MarshalText(%q) = %q, want %q", tt.in, got, tt.want)
		}
		var p Path
		if err := p.UnmarshalText(got); err != nil || string(p) != tt.in {
			t.Errorf("UnmarshalText(%q) = %q, %v; want %q", got, string(p), err, tt.in)
		}
		var b Bytes
		if err := b.UnmarshalText(got); err != nil || string(b) != tt.in {
			t.Errorf("Bytes.UnmarshalText(%q) = %q, %v; want %q", got, string(b), err, tt.in)
		}
	}
}

func TestPathTextRefused(t *testing.T) {
	for _, in := range []string{
		"%",          // truncated
		"a%4",        // truncated
		"%0a",        // lowercase hex
		"%fF",        // lowercase hex
		"%G0",        // not hex
		"%00",        // NUL
		"a\x00b",     // raw NUL
		"%41",        // 'A' must be literal
		"%2F",        // '/' must be literal
		"%20",        // space must be literal
		"%C3%A9",     // 'é' must be literal
		"%C3\xa9",    // half escaped
		"\xc3%A9",    // half escaped
		"%",          // bare percent
		"%%",         // percent must be %25
		"a\nb",       // raw newline
		"\x7f",       // raw DEL
		"\xff",       // raw invalid UTF-8
		"\u0085",     // raw C1 control
		"\u202e",     // raw bidi override
		"\U000E0041", // raw tag character
	} {
		var p Path
		if err := p.UnmarshalText([]byte(in)); err == nil {
			t.Errorf("UnmarshalText(%q) = %q, want error", in, string(p))
		}
	}
	if _, err := Path("a\x00").MarshalText(); err == nil {
		t.Error("MarshalText of a path with NUL succeeded")
	}
	if _, err := Bytes("\x00").MarshalText(); err == nil {
		t.Error("Bytes.MarshalText with NUL succeeded")
	}
}

func TestPathValid(t *testing.T) {
	for _, p := range []Path{".", "a", "a/b", "a/.b", "..a", "a..", "a/b/c d", "\xff/\n", "...", " "} {
		if err := p.Valid(); err != nil {
			t.Errorf("Valid(%q) = %v, want nil", string(p), err)
		}
	}
	for _, p := range []Path{"", "/", "/a", "a/", "a//b", "./a", "a/.", "..", "a/../b", "a/..", "a\x00b", "./"} {
		if err := p.Valid(); err == nil {
			t.Errorf("Valid(%q) = nil, want error", string(p))
		}
	}
}

func TestPathString(t *testing.T) {
	if got := Path("a\nb").String(); got != "a%0Ab" {
		t.Errorf("String = %q", got)
	}
	if got := Path("a\x00").String(); got != `"a\x00"` {
		t.Errorf("String with NUL = %q", got)
	}
}

// FuzzPathText checks that every byte string without NUL round-trips and
// that a text is accepted only when it is the encoding of what it decodes
// to.
func FuzzPathText(f *testing.F) {
	for _, s := range []string{"", ".", "src/main.go", "a\nb", "%", "%25", "%C3%A9", "é", "\xff", "\u202e", "%e2"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := string(b)
		text, err := Path(s).MarshalText()
		if strings.IndexByte(s, 0) >= 0 {
			if err == nil {
				t.Fatalf("MarshalText(%q) succeeded despite NUL", s)
			}
		} else {
			if err != nil {
				t.Fatalf("MarshalText(%q): %v", s, err)
			}
			if !utf8.Valid(text) {
				t.Fatalf("MarshalText(%q) = %q is not UTF-8", s, text)
			}
			for _, c := range text {
				if c < 0x20 || c == 0x7f {
					t.Fatalf("MarshalText(%q) = %q holds a control byte", s, text)
				}
			}
			var p Path
			if err := p.UnmarshalText(text); err != nil || string(p) != s {
				t.Fatalf("round trip of %q via %q = %q, %v", s, text, string(p), err)
			}
		}
		var p Path
		if err := p.UnmarshalText(b); err == nil {
			again, err := p.MarshalText()
			if err != nil || string(again) != s {
				t.Fatalf("UnmarshalText accepted %q, which encodes back as %q (%v)", s, again, err)
			}
		}
	})
}

// The text form spells printable characters as themselves and every other
// byte as %XX.
func ExamplePath_MarshalText() {
	for _, p := range []Path{"src/main.go", "100%", "new\nline", "caf\xc3\xa9", "bad\xff", "a\u202etxt.exe"} {
		text, _ := p.MarshalText()
		fmt.Printf("%s\n", text)
	}
	var p Path
	fmt.Println(p.UnmarshalText([]byte("%C3%A9")) != nil) // é must be spelled literally
	// Output:
	// src/main.go
	// 100%25
	// new%0Aline
	// café
	// bad%FF
	// a%E2%80%AEtxt.exe
	// true
}

// TestWithin: a path is within itself and its ancestors by whole
// components only; "/" holds every absolute path.
func TestWithin(t *testing.T) {
	for _, c := range []struct {
		p, dir string
		want   bool
	}{
		{"a", "a", true}, {"a/b", "a", true}, {"a/b/c", "a/b", true}, {"ab", "a", false}, {"a", "a/b", false},
		{"/ws/x", "/ws", true}, {"/ws", "/ws", true}, {"/wsx", "/ws", false}, {"/", "/", true}, {"/etc", "/", true},
	} {
		if got := Within(c.p, c.dir); got != c.want {
			t.Errorf("Within(%q, %q) = %v", c.p, c.dir, got)
		}
		if got := Within(Path(c.p), Path(c.dir)); got != c.want {
			t.Errorf("Within(Path(%q), Path(%q)) = %v", c.p, c.dir, got)
		}
	}
}
