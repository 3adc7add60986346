package kvlayout

import (
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/cputime"
)

// benchPages is the number of 16 KiB pages each iteration digests: large
// enough to leave L1, small enough to stay in L2/L3 like a hot engine page.
const benchPages = 64

func benchArena(b *testing.B) (Layout, []byte) {
	l, err := NewLayout(DtypeBF16)
	if err != nil {
		b.Fatal(err)
	}
	return l, GenArena(l, 1, benchPages)
}

// reportGBps reports throughput per wall second and per CPU second (the
// machine is shared and noisy; CPU time excludes waiting for a core).
func reportGBps(b *testing.B, bytes int, cpu0 time.Duration) {
	total := float64(bytes) * float64(b.N)
	b.ReportMetric(total/b.Elapsed().Seconds()/1e9, "GB/s")
	if cpu := (cputime.Process() - cpu0).Seconds(); cpu > 0 {
		b.ReportMetric(total/cpu/1e9, "cpu-GB/s")
	}
}

// BenchmarkXXH3Page digests 16 KiB bf16 pages with Page (xxh3-64).
func BenchmarkXXH3Page(b *testing.B) {
	l, arena := benchArena(b)
	b.SetBytes(int64(l.PageBytes()))
	var sink uint64
	cpu0 := cputime.Process()
	for i := 0; b.Loop(); i++ {
		sink += Page(l, arena, uint32(i%benchPages))
	}
	reportGBps(b, l.PageBytes(), cpu0)
	_ = sink
}

// BenchmarkBsumPage digests 16 KiB bf16 pages with PageBsum.
func BenchmarkBsumPage(b *testing.B) {
	l, arena := benchArena(b)
	b.SetBytes(int64(l.PageBytes()))
	var sink uint64
	cpu0 := cputime.Process()
	for i := 0; b.Loop(); i++ {
		sink += PageBsum(l, arena, uint32(i%benchPages))
	}
	reportGBps(b, l.PageBytes(), cpu0)
	_ = sink
}
