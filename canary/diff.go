package canary

import (
	"bytes"
	"unsafe"
)

// Diff compares in two levels of blocks. An outer block of diffOuter digests
// (4 KiB) is compared with the runtime's vectorised memequal; only when it
// differs are its inner blocks of diffInner digests compared the same way, and
// only differing inner blocks are scanned element by element. Equal pools cost
// one memequal per 4 KiB; at a 0.1% change rate about 40% of outer blocks
// differ but only about 3% of inner blocks are scanned.
const (
	diffOuter = 512
	diffInner = 32
)

// diffBlock is the alignment unit tests use to place changes on block edges.
const diffBlock = diffInner

// Diff appends to dst the indices i where before[i] != after[i], in ascending
// order, and returns the extended slice. It compares the arrays block by block
// and scans only the blocks that differ. Only the common prefix
// min(len(before), len(after)) is compared; callers pass equal lengths.
func Diff(before, after []uint64, dst []uint32) []uint32 {
	n := min(len(before), len(after))
	before, after = before[:n], after[:n]
	for lo := 0; lo < n; lo += diffOuter {
		hi := min(lo+diffOuter, n)
		if bytes.Equal(asBytes(before[lo:hi]), asBytes(after[lo:hi])) {
			continue
		}
		for ilo := lo; ilo < hi; ilo += diffInner {
			ihi := min(ilo+diffInner, hi)
			a, b := before[ilo:ihi], after[ilo:ihi]
			if bytes.Equal(asBytes(a), asBytes(b)) {
				continue
			}
			for i := range a {
				if a[i] != b[i] {
					dst = append(dst, uint32(ilo+i))
				}
			}
		}
	}
	return dst
}

// asBytes views a digest slice as its bytes (no copy) so the block compare
// runs on the runtime's vectorised memequal.
func asBytes(s []uint64) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 8*len(s))
}
