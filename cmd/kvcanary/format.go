package main

import (
	"fmt"
	"sort"
)

// Small text helpers the report commands share.

// units returns unit for n == 1 and its plural (unit+"s") otherwise.
func units(n int64, unit string) string {
	if n == 1 {
		return unit
	}
	return unit + "s"
}

// keysByCount is m's keys, the largest count first (ties by name).
func keysByCount(m map[string]uint64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

// plural renders "1 line", "2 lines".
func plural(n int64, unit string) string { return fmt.Sprintf("%d %s", n, units(n, unit)) }
