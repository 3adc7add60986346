package safetext

// EscapeJSON appends src, a JSON text, to dst with every C1 control
// (U+0080–U+009F; U+009B is an escape introducer for xterm) and every
// bidirectional formatting character (U+061C, U+200E, U+200F, U+202A–U+202E,
// U+2066–U+2069) and U+2028/U+2029 rewritten as a \uXXXX escape. These
// characters can only occur inside JSON strings, where the escape means the
// same character, so the output decodes to the same value; a terminal or
// editor showing it no longer obeys them. encoding/json leaves all of them
// but U+2028/U+2029 raw.
func EscapeJSON(dst, src []byte) []byte {
	last := 0
	for i := 0; i < len(src); i++ {
		c := src[i]
		if c != 0xc2 && c != 0xd8 && c != 0xe2 {
			continue
		}
		r, n := dangerous(src[i:])
		if n == 0 {
			continue
		}
		dst = append(dst, src[last:i]...)
		dst = append(dst, '\\', 'u', hexDigit(r>>12), hexDigit(r>>8), hexDigit(r>>4), hexDigit(r))
		i += n - 1
		last = i + 1
	}
	if last == 0 {
		return append(dst, src...)
	}
	return append(dst, src[last:]...)
}

// dangerous decodes the character at b when it is one EscapeJSON rewrites.
func dangerous(b []byte) (rune, int) {
	switch {
	case len(b) >= 2 && b[0] == 0xc2 && b[1] >= 0x80 && b[1] <= 0x9f:
		return rune(b[1]), 2 // U+0080–U+009F
	case len(b) >= 2 && b[0] == 0xd8 && b[1] == 0x9c:
		return 0x061c, 2
	case len(b) >= 3 && b[0] == 0xe2 && b[1] == 0x80:
		switch c := b[2]; {
		case c == 0x8e || c == 0x8f || c >= 0xa8 && c <= 0xae:
			return 0x2000 | rune(c&0x3f), 3
		}
	case len(b) >= 3 && b[0] == 0xe2 && b[1] == 0x81 && b[2] >= 0xa6 && b[2] <= 0xa9:
		return 0x2040 | rune(b[2]&0x3f), 3
	}
	return 0, 0
}

func hexDigit(r rune) byte { return "0123456789abcdef"[r&0xf] }

// NeedsJSONEscape reports whether EscapeJSON would change src.
func NeedsJSONEscape(src []byte) bool {
	for i := 0; i < len(src); i++ {
		if c := src[i]; c == 0xc2 || c == 0xd8 || c == 0xe2 {
			if _, n := dangerous(src[i:]); n > 0 {
				return true
			}
		}
	}
	return false
}
