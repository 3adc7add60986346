package graphdiff

import (
	"math"
	"slices"
)

// sortKey maps a float32 to a uint32 whose unsigned order is the float order
// graphdiff ranks by: every NaN is below -Inf (NaN sorts last), and -0 equals
// +0 (they tie, so the lower index wins).
func sortKey(f float32) uint32 {
	b := math.Float32bits(f)
	if f != f { // NaN, whatever its sign and payload
		return 0
	}
	if b == 0x80000000 { // -0 ranks as +0
		b = 0
	}
	// Branch-free (the sign of logits is a coin flip): negative values flip
	// every bit, positive ones only the sign bit.
	return b ^ (uint32(int32(b)>>31) | 0x80000000)
}

// keyFloat inverts sortKey for non-NaN keys.
func keyFloat(k uint32) float32 {
	if k&0x80000000 != 0 {
		return math.Float32frombits(k &^ 0x80000000)
	}
	return math.Float32frombits(^k)
}

// TopK returns the positions of the k largest entries of v, best first,
// appended to dst[:0] (dst may be nil; pass a reused buffer to avoid
// allocation). The order is total and deterministic: larger value first; equal
// values (and -0 against +0) by lower index first; -Inf below every finite
// value; NaN below -Inf, so NaNs are selected last, by lower index. k is clamped
// to [0, len(v)].
//
// It never sorts all of v: a strided sample of v estimates a threshold, one pass
// keeps the candidates at or above it, and only those are ordered exactly (a
// radix sort). When the estimate keeps too few candidates (adversarial layouts,
// many NaNs) it falls back to a radix select over all of v. Either path gives
// the same answer.
func TopK(v []float32, k int, dst []int32) []int32 {
	var s topkScratch
	return s.topK(v, k, dst)
}

// topkScratch holds the buffers TopK needs, so a Comparer can reuse them.
type topkScratch struct {
	sample []uint32
	cand   []int32
	pairs  []keyIdx
	tmp    []keyIdx
	keys   []uint32
}

type keyIdx struct {
	key uint32
	idx int32
}

const (
	topkSample   = 2048 // strided sample size used to estimate the threshold
	topkSmallCut = 4096 // below this length, order every entry exactly
)

func (s *topkScratch) topK(v []float32, k int, dst []int32) []int32 {
	dst = dst[:0]
	n := len(v)
	if k > n {
		k = n
	}
	if k <= 0 {
		return dst
	}
	if n <= topkSmallCut || k*8 > n {
		s.pairs = s.pairs[:0]
		for i, f := range v {
			s.pairs = append(s.pairs, keyIdx{sortKey(f), int32(i)})
		}
		return s.finish(k, dst)
	}
	// Estimate a threshold from a strided sample: the sample rank that expects
	// a little more than k entries of v at or above it.
	stride := n / topkSample
	s.sample = s.sample[:0]
	for i := 0; i < n && len(s.sample) < topkSample; i += stride {
		s.sample = append(s.sample, sortKey(v[i]))
	}
	m := len(s.sample)
	expect := float64(k) * float64(m) / float64(n)
	// The count of sample entries above the true k-th value is about
	// binomial with mean expect; 3 standard deviations (+2) of margin make a
	// too-high threshold (then the exact fallback runs) rare.
	r := int(expect+3*math.Sqrt(expect)) + 2
	if r < m {
		t := rankFromTop(s.sample, r)
		if t != 0 { // a NaN threshold would keep everything
			// Compare floats, not keys: few entries pass, so the branch is
			// predictable and only candidates pay for a key. f >= tf is
			// key(f) >= t for every non-NaN f (-0 == +0 on both sides), and
			// NaN (key 0 < t) fails both.
			s.cand = filterGE(v, keyFloat(t), s.cand[:0])
			s.pairs = s.pairs[:0]
			for _, i := range s.cand {
				s.pairs = append(s.pairs, keyIdx{sortKey(v[i]), i})
			}
			if len(s.pairs) >= k {
				return s.finish(k, dst)
			}
		}
	}
	return s.radixSelect(v, k, dst)
}

// radixSelect finds the k-th largest key with a 16-bit then 16-bit histogram
// over all of v, then gathers the winners in index order.
func (s *topkScratch) radixSelect(v []float32, k int, dst []int32) []int32 {
	n := len(v)
	if cap(s.keys) < n {
		s.keys = make([]uint32, n)
	}
	keys := s.keys[:n]
	var hist [1 << 16]int32
	for i, f := range v {
		key := sortKey(f)
		keys[i] = key
		hist[key>>16]++
	}
	hi, need := histSelect(&hist, k)
	clear(hist[:])
	for _, key := range keys {
		if key>>16 == hi {
			hist[key&0xffff]++
		}
	}
	lo, need := histSelect(&hist, need)
	t := hi<<16 | lo
	// Every key above t is in; of the keys equal to t, the first `need` in
	// index order are.
	s.pairs = s.pairs[:0]
	for i, key := range keys {
		if key > t || (key == t && need > 0) {
			if key == t {
				need--
			}
			s.pairs = append(s.pairs, keyIdx{key, int32(i)})
		}
	}
	return s.finish(k, dst)
}

// histSelect finds the bin holding the need-th largest key of a histogram
// and how many keys of that bin are still needed (need minus the keys in
// the bins above it). When all bins together hold fewer than need keys it
// returns bin 0 and what remains of need.
func histSelect(hist *[1 << 16]int32, need int) (bin uint32, stillNeed int) {
	for b := len(hist) - 1; b >= 0; b-- {
		c := int(hist[b])
		if c >= need {
			return uint32(b), need
		}
		need -= c
	}
	return 0, need
}

// finish orders s.pairs (gathered in ascending index order) by key descending,
// ties by index ascending, and appends the first k indices to dst.
//
// It is an LSD radix sort on the inverted key (so ascending order is
// descending key) in three stable passes of 11, 11 and 10 bits, with all
// three histograms counted in one read; stability keeps equal keys in
// ascending index order.
func (s *topkScratch) finish(k int, dst []int32) []int32 {
	p := s.pairs
	if cap(s.tmp) < len(p) {
		s.tmp = make([]keyIdx, len(p))
	}
	tmp := s.tmp[:len(p)]
	var h0, h1, h2 [2048]int32
	for i := range p {
		p[i].key = ^p[i].key
		key := p[i].key
		h0[key&0x7ff]++
		h1[key>>11&0x7ff]++
		h2[key>>22]++
	}
	for pass, h := range [3]*[2048]int32{&h0, &h1, &h2} {
		shift := uint(11 * pass)
		if int(h[p[0].key>>shift&0x7ff]) == len(p) {
			continue // every key has the same digit: the pass would not move anything
		}
		sum := int32(0)
		for i, c := range h {
			h[i] = sum
			sum += c
		}
		for _, e := range p {
			d := e.key >> shift & 0x7ff
			tmp[h[d]] = e
			h[d]++
		}
		p, tmp = tmp, p
	}
	for _, e := range p[:k] {
		dst = append(dst, e.idx)
	}
	return dst
}

// rankFromTop returns the r-th largest key of a (r = 0 is the largest),
// keeping the r+1 largest in a small descending array: most keys fail the
// first comparison, so this is about len(a) comparisons for small r. a is
// reordered.
func rankFromTop(a []uint32, r int) uint32 {
	if r >= len(a)/8 {
		slices.Sort(a)
		return a[len(a)-1-r]
	}
	top := make([]uint32, 0, r+1)
	for _, k := range a {
		if len(top) == r+1 && k <= top[r] {
			continue
		}
		i := len(top)
		if i < r+1 {
			top = append(top, k)
		} else {
			i = r
		}
		for i > 0 && top[i-1] < k {
			top[i] = top[i-1]
			i--
		}
		top[i] = k
	}
	return top[r]
}
