package checksum

import (
	"runtime"
	"sync"
)

// chunkLen is the largest chunk of a store: 64 Ki entries, 2 MiB.
const chunkLen = 1 << 16

// store keeps one side's entries in fixed-size chunks, so memory is 32 bytes
// per entry plus at most one partly filled chunk (no 1.25× slice growth, no
// copy on growth), and sorts them chunk by chunk (cache-sized sorts) before a
// k-way merge yields them in room order.
type store struct {
	chunks [][]entry
	n      int
}

func (s *store) add(e entry) {
	if k := len(s.chunks); k == 0 || len(s.chunks[k-1]) == cap(s.chunks[k-1]) {
		c := chunkLen
		if k == 0 {
			c = 1024
		} else if last := cap(s.chunks[k-1]); last < chunkLen {
			// The first chunks start small and double, so a small compare
			// stays small.
			c = 2 * last
		}
		s.chunks = append(s.chunks, make([]entry, 0, c))
	}
	k := len(s.chunks) - 1
	s.chunks[k] = append(s.chunks[k], e)
	s.n++
}

// merger yields a store's entries in room order.
type merger struct {
	chunks [][]entry
	pos    []int
	heap   []head // min-heap on key
}

// head is a chunk's current room, cached so sifting touches only the heap.
type head struct {
	key   uint64
	chunk int
}

func (s *store) sorted() *merger {
	m := &merger{chunks: s.chunks, pos: make([]int, len(s.chunks))}
	// Chunks sort independently: spread them over the available cores.
	work := make(chan []entry)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(s.chunks)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var tmp []entry
			for c := range work {
				tmp = radixSort(c, tmp)
			}
		}()
	}
	for _, c := range s.chunks {
		work <- c
	}
	close(work)
	wg.Wait()
	for i, c := range s.chunks {
		if len(c) > 0 {
			m.heap = append(m.heap, head{key: c[0].room, chunk: i})
		}
	}
	for i := len(m.heap)/2 - 1; i >= 0; i-- {
		m.down(i)
	}
	return m
}

func (m *merger) down(i int) {
	h := m.heap
	n := len(h)
	x := h[i]
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && h[r].key < h[l].key {
			j = r
		}
		if x.key <= h[j].key {
			break
		}
		h[i] = h[j]
		i = j
	}
	h[i] = x
}

// peek returns the next entry without consuming it.
func (m *merger) peek() (*entry, bool) {
	if len(m.heap) == 0 {
		return nil, false
	}
	c := m.heap[0].chunk
	return &m.chunks[c][m.pos[c]], true
}

// next consumes the entry peek returned.
func (m *merger) next() {
	c := m.heap[0].chunk
	m.pos[c]++
	if p := m.pos[c]; p < len(m.chunks[c]) {
		m.heap[0].key = m.chunks[c][p].room
	} else {
		last := len(m.heap) - 1
		m.heap[0] = m.heap[last]
		m.heap = m.heap[:last]
	}
	if len(m.heap) > 1 {
		m.down(0)
	}
}

// radixSort sorts c by room in place with an LSD radix sort on bytes,
// skipping bytes every entry shares (sequential room ids sort in one or two
// passes). tmp is scratch space, returned for reuse.
func radixSort(c, tmp []entry) []entry {
	if len(c) < 2 {
		return tmp
	}
	if cap(tmp) < len(c) {
		tmp = make([]entry, len(c))
	}
	tmp = tmp[:len(c)]
	var counts [8][256]int
	for i := range c {
		k := c[i].room
		for b := range 8 {
			counts[b][byte(k>>(8*b))]++
		}
	}
	src, dst := c, tmp
	for b := range 8 {
		cnt := &counts[b]
		if cnt[byte(src[0].room>>(8*b))] == len(src) {
			continue // every entry has the same byte here
		}
		var pos [256]int
		sum := 0
		for v := range 256 {
			pos[v] = sum
			sum += cnt[v]
		}
		shift := 8 * b
		for i := range src {
			v := byte(src[i].room >> shift)
			dst[pos[v]] = src[i]
			pos[v]++
		}
		src, dst = dst, src
	}
	if &src[0] != &c[0] {
		copy(c, src)
	}
	return tmp
}
