package kvlayout

import "encoding/binary"

// GenArena returns an arena of npages pages of layout l filled by the test
// vector generator of SPEC.md §5: byte 8j..8j+7 of the arena is the
// little-endian Mix64(seed + (j+1)·0x9E3779B97F4A7C15) (splitmix64's stream).
func GenArena(l Layout, seed uint64, npages int) []byte {
	arena := make([]byte, npages*l.PageBytes())
	x := seed
	for j := 0; j+8 <= len(arena); j += 8 {
		x += bsumK
		binary.LittleEndian.PutUint64(arena[j:], Mix64(x))
	}
	return arena
}
