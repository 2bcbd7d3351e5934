package review

import "strconv"

// Quote spells name as git does in a patch (quote_c_style with
// core.quotePath on): unchanged when it holds no control byte, '"', '\\'
// nor a byte from 0x7f up; otherwise in double quotes with \a \b \t \n \v
// \f \r \" \\ and three octal digits for every other such byte. A name
// beginning with '-' needs no quoting: in a patch it always follows a
// prefix ("a/", "b/").
func Quote(name string) string {
	return quoteTwo("", name)
}

// quoteTwo is git's quote_two: prefix+name, quoted as a whole when name
// needs quoting.
func quoteTwo(prefix, name string) string {
	if !needsQuote(name) {
		return prefix + name
	}
	b := make([]byte, 0, len(prefix)+len(name)+8)
	b = append(b, '"')
	b = append(b, prefix...)
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch c {
		case '\a':
			b = append(b, `\a`...)
		case '\b':
			b = append(b, `\b`...)
		case '\t':
			b = append(b, `\t`...)
		case '\n':
			b = append(b, `\n`...)
		case '\v':
			b = append(b, `\v`...)
		case '\f':
			b = append(b, `\f`...)
		case '\r':
			b = append(b, `\r`...)
		case '"':
			b = append(b, `\"`...)
		case '\\':
			b = append(b, `\\`...)
		default:
			if c < 0x20 || c >= 0x7f {
				o := strconv.FormatUint(uint64(c), 8)
				b = append(b, '\\')
				for range 3 - len(o) {
					b = append(b, '0')
				}
				b = append(b, o...)
			} else {
				b = append(b, c)
			}
		}
	}
	return string(append(b, '"'))
}

func needsQuote(name string) bool {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x7f {
			return true
		}
	}
	return false
}
