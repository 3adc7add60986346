package logscan

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/cputime"
)

// decodeLog builds n SGLang decode lines with varying numbers and timestamps.
func decodeLog(n int) []byte {
	var b bytes.Buffer
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "[2025-06-01 12:%02d:%02d TP0] Decode batch, #running-req: %d, #token: %d, token usage: 0.%02d, cuda graph: True, gen throughput (token/s): %d.%02d, #queue-req: %d, \n",
			(i/60)%60, i%60, i%80, 1000+i*7%90000, i%100, 1000+i%3000, i%100, i%13)
	}
	return b.Bytes()
}

// reportThroughput reports wall-clock MB/s (the target's metric) and MB per
// CPU-second of this process (robust to a loaded machine).
func reportThroughput(b *testing.B, bytes int, cpu0 time.Duration) {
	total := float64(bytes) * float64(b.N)
	b.ReportMetric(total/b.Elapsed().Seconds()/1e6, "MB/s")
	if cpu := cputime.Process() - cpu0; cpu > 0 && cpu0 > 0 {
		b.ReportMetric(total/cpu.Seconds()/1e6, "MB/cpu-s")
	}
}

// BenchmarkScanDecodeLines measures ScanAll over SGLang decode lines — the
// throughput `logs scan` and `repro --server-log` need (target ≥ 500 MB/s).
func BenchmarkScanDecodeLines(b *testing.B) {
	data := decodeLog(20000)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cputime.Process()
	var sum *Summary
	for i := 0; i < b.N; i++ {
		var err error
		sum, err = ScanAll(bytes.NewReader(data), "bench", Options{Year: 2025})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportThroughput(b, len(data), cpu0)
	if sum.DecodeBatches != 20000 {
		b.Fatalf("decode batches = %d, want 20000", sum.DecodeBatches)
	}
}

// BenchmarkScanMixedLines measures a log where most lines are not ours
// (HTTP access lines), which take the slower search-anywhere path.
func BenchmarkScanMixedLines(b *testing.B) {
	var buf bytes.Buffer
	dec := decodeLog(2000)
	lines := bytes.SplitAfter(dec, []byte("\n"))
	for i, l := range lines {
		buf.Write(l)
		if i%2 == 0 {
			buf.WriteString(`[2025-06-01 12:00:00] INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK` + "\n")
		}
	}
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	cpu0 := cputime.Process()
	for i := 0; i < b.N; i++ {
		if _, err := ScanAll(bytes.NewReader(data), "bench", Options{Year: 2025}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportThroughput(b, len(data), cpu0)
}
