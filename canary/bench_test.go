package canary

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/pagediff"
)

// benchPool is 524,288 page digests (8 GiB of 16 KiB pages) with owners: 256
// requests own 1/2 of the pool, 64 of them run, and each running request
// stores into one expected page.
type benchPool struct {
	before, after []uint64
	owner         []string
	running       []string
	expected      []uint32
}

const benchPages = 524288

func newBenchPool(changedFrac float64) *benchPool {
	rng := rand.New(rand.NewPCG(7, 11))
	p := &benchPool{before: make([]uint64, benchPages), owner: make([]string, benchPages)}
	reqs := make([]string, 256)
	for i := range reqs {
		reqs[i] = fmt.Sprintf("req-%d", i)
	}
	p.running = reqs[:64]
	for i := range p.before {
		p.before[i] = rng.Uint64()
		if i%2 == 0 {
			p.owner[i] = reqs[(i/64)%len(reqs)]
		}
	}
	p.after = slices.Clone(p.before)
	for i := range int(changedFrac * benchPages) {
		_ = i
		p.after[rng.IntN(benchPages)]++
	}
	for i := range 64 {
		pg := uint32(i * 128 * 2) // an owned page of running request i
		p.expected = append(p.expected, pg)
	}
	return p
}

func benchDiffClassify(b *testing.B, changedFrac float64) {
	p := newBenchPool(changedFrac)
	owner := func(pg uint32) string { return p.owner[pg] }
	checked := make([]uint32, benchPages)
	for i := range checked {
		checked[i] = uint32(i)
	}
	var (
		idx []uint32
		chg []hook.PageChange
		cls Classifier
		res ReplayResult
	)
	obs := &hook.CanaryPages{PagesTotal: benchPages, PagesChecked: benchPages, Policy: "all",
		Expected: p.expected, Padding: []uint32{0}, Running: p.running}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		idx = pagediff.Diff(p.before, p.after, idx[:0])
		chg = Changes(checked, p.before, p.after, idx, owner, chg[:0])
		obs.Step = uint64(i)
		obs.Changed = chg
		cls.Classify(obs, &res)
	}
	b.StopTimer()
	if changedFrac > 0 && len(res.Pages) == 0 {
		b.Fatal("no changed pages classified")
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/op")
	b.ReportMetric(float64(len(res.Pages)), "changed")
}

// BenchmarkDiffClassify524k: diff + classify 524,288 page digests with 0.1%
// changed (target ≤ 1 ms/op on one core), and the all-equal case.
func BenchmarkDiffClassify524k(b *testing.B) {
	b.Run("changed=0.1%", func(b *testing.B) { benchDiffClassify(b, 0.001) })
	b.Run("equal", func(b *testing.B) { benchDiffClassify(b, 0) })
}

// BenchmarkDiff524k isolates the block compare.
func BenchmarkDiff524k(b *testing.B) {
	p := newBenchPool(0.001)
	var idx []uint32
	b.SetBytes(2 * 8 * benchPages)
	for b.Loop() {
		idx = pagediff.Diff(p.before, p.after, idx[:0])
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/op")
}
