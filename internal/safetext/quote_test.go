package safetext

import "testing"

func TestQuote(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain text, with spaces", "plain text, with spaces"},
		{"ünïcode ✓ 日本", "ünïcode ✓ 日本"},
		{"", ""},
		{"red \x1b[31mALERT", `"red \x1b[31mALERT"`},
		{"two\nlines", `"two\nlines"`},
		{"tab\there", `"tab\there"`},
		{"bad utf8 \xc0\xaf", `"bad utf8 \xc0\xaf"`},
		{"bidi \u202egnp.exe", `"bidi \u202egnp.exe"`},
		{"nul\x00", `"nul\x00"`},
	} {
		if got := Quote(tc.in); got != tc.want {
			t.Errorf("Quote(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
