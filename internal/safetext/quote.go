package safetext

import (
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Quote returns s unchanged when it is printable text, and strconv-quoted
// otherwise, so untrusted strings (model output, log lines) can never send
// escape sequences to a terminal.
func Quote(s string) string {
	if !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if r != ' ' && !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}
