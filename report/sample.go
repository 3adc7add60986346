package report

import (
	"fmt"
	"strconv"
)

// sample keeps a systematic sample of a stream of values: every stride-th,
// in arrival order, at most limit of them. When the sample is full, every
// second kept value is dropped and the stride doubles, so the sample always
// spans the whole stream (a plot "over time" covers the run, not its
// beginning) and is never more than limit long.
type sample[T any] struct {
	limit  int
	stride uint64
	seen   uint64
	kept   []T
}

func newSample[T any](limit int) *sample[T] { return &sample[T]{limit: max(limit, 2), stride: 1} }

func (s *sample[T]) add(v T) {
	i := s.seen
	s.seen++
	if i%s.stride != 0 {
		return
	}
	if len(s.kept) == s.limit {
		n := 0
		for j := 0; j < len(s.kept); j += 2 {
			s.kept[n] = s.kept[j]
			n++
		}
		clear(s.kept[n:])
		s.kept = s.kept[:n]
		s.stride *= 2
		if i%s.stride != 0 {
			return
		}
	}
	s.kept = append(s.kept, v)
}

// Sampled says how much of a plot's data was kept.
type Sampled struct {
	Shown  int    `json:"shown"`
	Total  uint64 `json:"total"`
	Stride uint64 `json:"stride"` // every Stride-th value was kept; 1 = all
}

func (s *sample[T]) sampled() Sampled {
	return Sampled{Shown: len(s.kept), Total: s.seen, Stride: s.stride}
}

// Partial reports whether values were left out.
func (s Sampled) Partial() bool { return uint64(s.Shown) < s.Total }

// Note says what a plot built from the sample shows ("" when it shows
// everything): "a sample: 20000 of 81234 scheduler observations (every 4th,
// across the whole run)".
func (s Sampled) Note(what string) string {
	if !s.Partial() {
		return ""
	}
	return fmt.Sprintf("a sample: %d of %d %s (every %s, across the whole run)", s.Shown, s.Total, what, ordinal(s.Stride))
}

func ordinal(n uint64) string {
	suf := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suf = "st"
	case n%10 == 2:
		suf = "nd"
	case n%10 == 3:
		suf = "rd"
	}
	return strconv.FormatUint(n, 10) + suf
}
