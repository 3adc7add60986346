package checksum

import "testing"

func TestIntRanges(t *testing.T) {
	for _, c := range []struct {
		in   []int
		want string
	}{{nil, ""}, {[]int{4}, "4"}, {[]int{1, 2, 3, 7}, "1-3,7"}, {[]int{0, 2, 3}, "0,2-3"}} {
		if got := intRanges(c.in); got != c.want {
			t.Errorf("intRanges(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}
