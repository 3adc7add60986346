package pagediff

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Policy kinds.
const (
	PolicyLive  = "live"  // pages of the running requests (plus expected, padding and transfer pages)
	PolicyAll   = "all"   // every page of the pool, every replay
	PolicySweep = "sweep" // live pages plus a rotating 1/N slice of the pool
)

// Policy selects which pages are digested around a replay. The zero Policy is
// "live".
type Policy struct {
	Kind   string // "live" | "all" | "sweep"; "" means live
	SweepN int    // sweep only: the pool is covered once every SweepN replays
}

// maxSweepN bounds sweep:N so a typo cannot silently turn a sweep into "never".
const maxSweepN = 1 << 20

// ParsePolicy parses "live" (also ""), "all" or "sweep:N" with N ≥ 1.
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "", PolicyLive:
		return Policy{Kind: PolicyLive}, nil
	case PolicyAll:
		return Policy{Kind: PolicyAll}, nil
	}
	if rest, ok := strings.CutPrefix(s, PolicySweep+":"); ok {
		n, err := strconv.Atoi(rest)
		if err != nil || n < 1 || n > maxSweepN {
			return Policy{}, fmt.Errorf("parse canary policy %q: sweep interval must be an integer in 1..%d", s, maxSweepN)
		}
		return Policy{Kind: PolicySweep, SweepN: n}, nil
	}
	return Policy{}, fmt.Errorf("parse canary policy %q: want live, all or sweep:N", s)
}

// String returns the form ParsePolicy accepts ("live", "all", "sweep:8").
func (p Policy) String() string {
	switch p.Kind {
	case PolicyAll:
		return PolicyAll
	case PolicySweep:
		return PolicySweep + ":" + strconv.Itoa(p.SweepN)
	}
	return PolicyLive
}

// SweepRange returns the half-open page range [lo, hi) that sweep:N adds at
// replay number replay: slice replay mod N of N contiguous slices of the pool.
// Every page lies in exactly one slice, so N consecutive replays cover the
// whole pool. For other kinds it returns an empty range ("all" covers
// everything anyway).
func (p Policy) SweepRange(replay uint64, totalPages int) (lo, hi int) {
	if p.Kind != PolicySweep || p.SweepN < 1 || totalPages <= 0 {
		return 0, 0
	}
	n := uint64(p.SweepN)
	c := replay % n
	t := uint64(totalPages)
	return int(c * t / n), int((c + 1) * t / n)
}

// PagesToCheck appends to dst the pages to digest at replay number replay and
// returns the extended slice: the live pages always (the caller passes the
// pages of the running requests together with the step's expected, padding
// and transfer pages), plus for sweep:N the rotating 1/N slice of the pool, or
// every page for "all". The appended pages are sorted and distinct; live
// entries at or beyond totalPages are dropped. dst's existing contents are
// left untouched.
func (p Policy) PagesToCheck(replay uint64, live []uint32, totalPages int, dst []uint32) []uint32 {
	if totalPages <= 0 {
		return dst
	}
	start := len(dst)
	if p.Kind == PolicyAll {
		dst = slices.Grow(dst, totalPages)
		for pg := range totalPages {
			dst = append(dst, uint32(pg))
		}
		return dst
	}
	lo, hi := p.SweepRange(replay, totalPages)
	for _, pg := range live {
		if int64(pg) < int64(totalPages) && (int(pg) < lo || int(pg) >= hi) {
			dst = append(dst, pg)
		}
	}
	out := dst[start:]
	slices.Sort(out)
	out = slices.Compact(out)
	dst = dst[:start+len(out)]
	if lo < hi {
		// The sweep slice is contiguous and disjoint from what was kept above:
		// merge it in at its sorted position.
		at := start + sortedSearch(dst[start:], uint32(lo))
		dst = slices.Insert(dst, at, make([]uint32, hi-lo)...)
		for i := range hi - lo {
			dst[at+i] = uint32(lo + i)
		}
	}
	return dst
}

func sortedSearch(s []uint32, v uint32) int {
	i, _ := slices.BinarySearch(s, v)
	return i
}
