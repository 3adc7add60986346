package pagediff

import (
	"slices"
	"testing"
)

func TestParsePolicy(t *testing.T) {
	cases := []struct {
		in      string
		want    Policy
		str     string
		wantErr bool
	}{
		{in: "", want: Policy{Kind: PolicyLive}, str: "live"},
		{in: "live", want: Policy{Kind: PolicyLive}, str: "live"},
		{in: "all", want: Policy{Kind: PolicyAll}, str: "all"},
		{in: "sweep:1", want: Policy{Kind: PolicySweep, SweepN: 1}, str: "sweep:1"},
		{in: "sweep:800", want: Policy{Kind: PolicySweep, SweepN: 800}, str: "sweep:800"},
		{in: "sweep:0", wantErr: true},
		{in: "sweep:-3", wantErr: true},
		{in: "sweep:", wantErr: true},
		{in: "sweep", wantErr: true},
		{in: "sweep:8x", wantErr: true},
		{in: "sweep:99999999999", wantErr: true},
		{in: "Live", wantErr: true},
		{in: "none", wantErr: true},
	}
	for _, c := range cases {
		got, err := ParsePolicy(c.in)
		if c.wantErr {
			if err == nil {
				t.Errorf("ParsePolicy(%q) = %v, want error", c.in, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParsePolicy(%q) = %v, %v; want %v", c.in, got, err, c.want)
			continue
		}
		if got.String() != c.str {
			t.Errorf("ParsePolicy(%q).String() = %q, want %q", c.in, got.String(), c.str)
		}
		back, err := ParsePolicy(got.String())
		if err != nil || back != got {
			t.Errorf("round trip of %q: %v, %v", c.in, back, err)
		}
	}
	if (Policy{}).String() != "live" {
		t.Errorf("zero Policy is %q, want live", Policy{}.String())
	}
}

func isSortedDistinct(s []uint32) bool {
	for i := 1; i < len(s); i++ {
		if s[i] <= s[i-1] {
			return false
		}
	}
	return true
}

func TestPagesToCheckLive(t *testing.T) {
	p := Policy{Kind: PolicyLive}
	dst := []uint32{42}
	got := p.PagesToCheck(3, []uint32{9, 2, 9, 0, 100, 5}, 50, dst)
	if got[0] != 42 {
		t.Fatalf("dst prefix lost: %v", got)
	}
	if want := []uint32{0, 2, 5, 9}; !slices.Equal(got[1:], want) {
		t.Fatalf("live pages = %v, want %v (sorted, distinct, out-of-range dropped)", got[1:], want)
	}
	if got := p.PagesToCheck(0, []uint32{1}, 0, nil); len(got) != 0 {
		t.Fatalf("empty pool: got %v", got)
	}
}

func TestPagesToCheckAll(t *testing.T) {
	got := Policy{Kind: PolicyAll}.PagesToCheck(17, []uint32{3}, 1000, nil)
	if len(got) != 1000 || !isSortedDistinct(got) || got[0] != 0 || got[999] != 999 {
		t.Fatalf("all: got %d pages, sorted=%v", len(got), isSortedDistinct(got))
	}
}

// TestSweepCoversPoolWithinN checks the coverage promise: under sweep:N,
// every page of the pool is digested at least once in any N consecutive
// replays, live pages are digested every replay, and each replay digests
// about 1/N of the pool beyond the live set.
func TestSweepCoversPoolWithinN(t *testing.T) {
	for _, total := range []int{1, 7, 64, 1000, 4099} {
		for _, n := range []int{1, 2, 3, 8, 64, 5000} {
			p := Policy{Kind: PolicySweep, SweepN: n}
			live := []uint32{uint32(total - 1), 0, uint32(total / 2)}
			for _, start := range []uint64{0, 5, 1<<40 + 3} {
				seen := make([]int, total)
				for r := start; r < start+uint64(n); r++ {
					got := p.PagesToCheck(r, live, total, nil)
					if !isSortedDistinct(got) {
						t.Fatalf("total=%d n=%d r=%d: pages not sorted/distinct", total, n, r)
					}
					for _, l := range live {
						if _, ok := slices.BinarySearch(got, l); !ok {
							t.Fatalf("total=%d n=%d r=%d: live page %d not checked", total, n, r, l)
						}
					}
					if extra := len(got) - len(live); extra > total/n+1+len(live) {
						t.Fatalf("total=%d n=%d: replay %d digests %d pages, more than 1/N of the pool", total, n, r, len(got))
					}
					for _, pg := range got {
						seen[pg]++
					}
				}
				for pg, k := range seen {
					if k == 0 {
						t.Fatalf("total=%d sweep:%d from replay %d: page %d never checked in %d replays", total, n, start, pg, n)
					}
				}
			}
		}
	}
}
