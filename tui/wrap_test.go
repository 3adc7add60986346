package tui

import (
	"reflect"
	"testing"
)

func TestWrap(t *testing.T) {
	for _, tc := range []struct {
		in   string
		w    int
		want []string
	}{
		{"short", 10, []string{"short"}},
		{"the quick brown fox", 9, []string{"the quick", "brown fox"}},
		{"a verylongwordhere b", 6, []string{"a", "verylo", "ngword", "here b"}},
		{"0,1,2,3,4,5,6,7", 4, []string{"0,1,", "2,3,", "4,5,", "6,7"}},
		{"界界界", 3, []string{"界", "界", "界"}}, // 2 cells each
		{"界", 1, []string{"界"}},             // wider than the line: alone, never a loop
		{"x", 0, []string{"x"}},
	} {
		if got := wrap(tc.in, tc.w); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("wrap(%q, %d) = %q, want %q", tc.in, tc.w, got, tc.want)
		}
	}
}
