package traces

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/cputime"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// genHostBundle writes a bundle of about jsonMB MB of event JSON from host:
// benchEvents' mix (room checksums, replays, canary pages, sched, gpu), its
// timestamps interleaving with another host's (phase 0 or 1).
func genHostBundle(tb testing.TB, path, host string, jsonMB int, phase int64) (events int, jsonBytes int64) {
	tb.Helper()
	evs := benchEvents(4096)
	w, err := Create(path, Manifest{Host: hook.HostInfo{Hostname: host}, Run: "bench-" + host})
	if err != nil {
		tb.Fatal(err)
	}
	limit := int64(jsonMB) << 20
	for i := 0; jsonBytes < limit; i++ {
		ev := evs[i%len(evs)]
		ev.TS = 1_796_202_000_000_000_000 + int64(i)*2000 + phase*1000
		ev.Src.Node = host
		line, err := ev.MarshalJSON()
		if err != nil {
			tb.Fatal(err)
		}
		if err := w.WriteLine(ev.Kind, ev.TS, line); err != nil {
			tb.Fatal(err)
		}
		jsonBytes += int64(len(line)) + 1
		events++
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return events, jsonBytes
}

// peakHeap samples the Go heap in use every 5 ms until stop is called and
// returns its largest value.
func peakHeap() (stop func() uint64) {
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 { close(done); wg.Wait(); return peak.Load() }
}

// BenchmarkMerge merges two generated host bundles (KVCANARY_MERGE_BENCH_MB
// MB of event JSON each, default 150) into one, as `trace merge` does: read,
// k-way merge, write (zstd). MB/s is JSON bytes in per wall second; peak-MB
// is the largest Go heap in use during the merge (sampled every 5 ms),
// against the inputs' size (in-MB).
func BenchmarkMerge(b *testing.B) {
	mb := 150
	if v, err := strconv.Atoi(os.Getenv("KVCANARY_MERGE_BENCH_MB")); err == nil && v > 0 {
		mb = v
	}
	dir := b.TempDir()
	a, c := filepath.Join(dir, "a.kvtrace"), filepath.Join(dir, "b.kvtrace")
	na, ja := genHostBundle(b, a, "prefill-host", mb, 0)
	nc, jc := genHostBundle(b, c, "decode-host", mb, 1)
	var disk int64
	for _, p := range []string{a, c} {
		fi, _ := os.Stat(p)
		disk += fi.Size()
	}
	runtime.GC()
	b.ResetTimer()
	cpu0 := cputime.Process()
	var peak uint64
	for range b.N {
		rs := openAll(b, a, c)
		stop := peakHeap()
		plan := PlanMerge(rs, MergeOptions{})
		w, err := Create(filepath.Join(dir, "all.kvtrace"), MergeManifest(plan, MergeOptions{}, InputManifests(rs)))
		if err != nil {
			b.Fatal(err)
		}
		rep, err := Merge(context.Background(), rs, plan, w, MergeOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		peak = max(peak, stop())
		if rep.Events != uint64(na+nc) || rep.OutOfOrder != 0 {
			b.Fatalf("merged %d of %d events, %d out of order", rep.Events, na+nc, rep.OutOfOrder)
		}
		for _, r := range rs {
			r.Close()
		}
	}
	b.StopTimer()
	if cpu := cputime.Process() - cpu0; cpu > 0 {
		b.ReportMetric(float64(ja+jc)*float64(b.N)/1e6/cpu.Seconds(), "MB/cpu-s")
	}
	secs := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(ja+jc)/1e6/secs, "MB/s")
	b.ReportMetric(float64(na+nc)/secs, "events/s")
	b.ReportMetric(float64(peak)/(1<<20), "peak-MB")
	b.ReportMetric(float64(ja+jc)/(1<<20), "in-MB")
	b.ReportMetric(float64(disk)/(1<<20), "disk-MB")
}

// TestGenerateMergeBundle writes a host bundle for a by-hand `trace merge`
// run: KVCANARY_GEN_BUNDLE=path,host,MB,phase. Skipped otherwise.
func TestGenerateMergeBundle(t *testing.T) {
	spec := os.Getenv("KVCANARY_GEN_BUNDLE")
	if spec == "" {
		t.Skip("KVCANARY_GEN_BUNDLE=path,host,MB,phase not set (by-hand benchmark input)")
	}
	var parts []string
	for start, i := 0, 0; i <= len(spec); i++ {
		if i == len(spec) || spec[i] == ',' {
			parts = append(parts, spec[start:i])
			start = i + 1
		}
	}
	if len(parts) != 4 {
		t.Fatalf("KVCANARY_GEN_BUNDLE=%q: want path,host,MB,phase", spec)
	}
	mb, err1 := strconv.Atoi(parts[2])
	phase, err2 := strconv.ParseInt(parts[3], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("KVCANARY_GEN_BUNDLE=%q: MB and phase are integers", spec)
	}
	n, js := genHostBundle(t, parts[0], parts[1], mb, phase)
	t.Logf("%s: %d events, %d bytes of JSON", parts[0], n, js)
}
