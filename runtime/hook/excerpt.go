package hook

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Excerpt bounds a reply's text for Session.Excerpt: s itself when it fits
// MaxExcerpt bytes, else its head cut at a rune boundary and marked
// "… [N bytes in all]". Invalid UTF-8 becomes U+FFFD first, so the excerpt
// always travels on the wire. Every producer of session events (repro, the
// twin) cuts the same way.
func Excerpt(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= MaxExcerpt {
		return s
	}
	mark := "… [" + strconv.Itoa(len(s)) + " bytes in all]"
	cut := MaxExcerpt - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
