package graphdiff

import "slices"

// SelectionDiff compares two index selections as sets: missing holds the
// positions in want that got lacks, extra the positions in got that want lacks,
// both ascending and without duplicates. With want the eager selection and got
// the graph's, missing is "missing from graph" and extra "extra in graph".
// Neither input is modified.
func SelectionDiff(want, got []int32) (missing, extra []int32) {
	missing, extra, _ = diffSorted(sortedSet(want), sortedSet(got))
	return missing, extra
}

// diffSorted merges two ascending, duplicate-free sets: the entries of a
// that b lacks, the entries of b that a lacks (both ascending), and how
// many they share.
func diffSorted(a, b []int32) (missing, extra []int32, inter int) {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i] < b[j]):
			missing = append(missing, a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			extra = append(extra, b[j])
			j++
		default:
			inter++
			i++
			j++
		}
	}
	return missing, extra, inter
}

// Jaccard is |a ∩ b| / |a ∪ b| of two index selections taken as sets; two
// empty selections have Jaccard 1.
func Jaccard(a, b []int32) float64 {
	x := sortedSet(a)
	y := sortedSet(b)
	if len(x) == 0 && len(y) == 0 {
		return 1
	}
	_, _, inter := diffSorted(x, y)
	return float64(inter) / float64(len(x)+len(y)-inter)
}

// FirstDiffRank returns the first rank at which two best-first selections name
// different positions, or -1 when they are identical. When one is a prefix of
// the other, the answer is the shorter length.
func FirstDiffRank(a, b []int32) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return n
	}
	return -1
}

func sortedSet(a []int32) []int32 { return sortedSetInto(nil, a) }

// sortedSetInto writes a's distinct positions, ascending, into dst[:0].
func sortedSetInto(dst, a []int32) []int32 {
	dst = append(dst[:0], a...)
	slices.Sort(dst)
	return slices.Compact(dst)
}
