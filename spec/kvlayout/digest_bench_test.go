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
	l := mustLayout(b, DtypeBF16)
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

// benchPageDigest digests benchPages 16 KiB bf16 pages in turn with digest.
func benchPageDigest(b *testing.B, digest func(Layout, []byte, uint32) uint64) {
	l, arena := benchArena(b)
	b.SetBytes(int64(l.PageBytes()))
	var sink uint64
	cpu0 := cputime.Process()
	for i := 0; b.Loop(); i++ {
		sink += digest(l, arena, uint32(i%benchPages))
	}
	reportGBps(b, l.PageBytes(), cpu0)
	_ = sink
}

// BenchmarkXXH3Page digests 16 KiB bf16 pages with Page (xxh3-64).
func BenchmarkXXH3Page(b *testing.B) { benchPageDigest(b, Page) }

// BenchmarkBsumPage digests 16 KiB bf16 pages with PageBsum.
func BenchmarkBsumPage(b *testing.B) { benchPageDigest(b, PageBsum) }
