package checksum

import (
	"bytes"
	"runtime"
	"strconv"
	"testing"

	"github.com/kvcanary/kvcanary/internal/cputime"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/kvlayout"
)

// benchLog returns about size bytes of a realistic checksum log: prefixed
// record lines in hex and decimal, interleaved with ordinary log lines.
func benchLog(size int) []byte {
	var b []byte
	for i := uint64(0); len(b) < size; i++ {
		switch i % 4 {
		case 0:
			b = append(b, "[2026-03-01 10:02:03 DP0 TP0] Decode batch. #running-req: 31, #token: 51234, token usage: 0.42, gen throughput (token/s): 1234.5\n"...)
		case 1, 2:
			r := Record{Room: i * 0x9E3779B97F4A7C15 >> 1, Side: hook.SidePrefill, SeqLen: int(i % 9000), Pages: int(i%9000+63) / 64, Bsum: kvlayout.Mix64(i), XXH3: kvlayout.Mix64(i + 1)}
			if i%4 == 2 {
				r.Side = hook.SideDecode
			}
			b = append(b, "[2026-03-01 10:02:03 TP0] "...)
			b = AppendLogLine(b, &r)
			b = append(b, '\n')
		case 3:
			b = append(b, "2026-03-01 10:02:04 kvcanary room_checksum side=decode room="...)
			b = strconv.AppendUint(b, i, 10)
			b = append(b, " seq_len=4096 pages=64 bsum="...)
			b = strconv.AppendUint(b, kvlayout.Mix64(i), 10)
			b = append(b, " xxh3="...)
			b = strconv.AppendUint(b, kvlayout.Mix64(i+7), 10)
			b = append(b, '\n')
		}
	}
	return b
}

// BenchmarkParseLines scans a mixed checksum log (target ≥ 300 MB/s).
func BenchmarkParseLines(b *testing.B) {
	data := benchLog(16 << 20)
	b.SetBytes(int64(len(data)))
	var n int64
	cpu0 := cputime.Process()
	for b.Loop() {
		st, err := ScanLog(bytes.NewReader(data), "bench", func(*Record) error { n++; return nil })
		if err != nil || st.Records == 0 {
			b.Fatalf("scan: %v %+v", err, st)
		}
	}
	b.ReportMetric(float64(len(data))*float64(b.N)/b.Elapsed().Seconds()/1e6, "MB/s")
	if cpu := (cputime.Process() - cpu0).Seconds(); cpu > 0 {
		b.ReportMetric(float64(len(data))*float64(b.N)/cpu/1e6, "cpu-MB/s")
	}
}

func benchCompare(b *testing.B, rooms int) {
	var perRecord, perRoom float64
	cpu0 := cputime.Process()
	for b.Loop() {
		b.StopTimer()
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		b.StartTimer()
		c := NewComparer(Options{})
		var r Record
		// Rooms are random 63-bit ids (as SGLang's bootstrap_room); the two
		// sides arrive in different orders; one room in 10000 mismatches.
		for side := range 2 {
			r.Side = hook.SidePrefill
			if side == 1 {
				r.Side = hook.SideDecode
			}
			for i := range rooms {
				k := uint64(i)
				if side == 1 {
					k = uint64(rooms - 1 - i)
				}
				r.Room = kvlayout.Mix64(k) >> 1
				r.SeqLen, r.Pages = 1000+int(k%5000), 16+int(k%79)
				r.Bsum, r.XXH3 = kvlayout.Mix64(k+1), kvlayout.Mix64(k+2)
				if side == 1 && k%10000 == 0 {
					r.XXH3++
				}
				c.Add(&r, "bench")
			}
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&m1)
		live := float64(m1.HeapAlloc) - float64(m0.HeapAlloc)
		perRecord = live / float64(2*rooms)
		perRoom = live / float64(rooms)
		b.StartTimer()
		rep := c.Finish()
		if rep.Rooms != rooms || rep.Classes.Mismatch != (rooms+9999)/10000 {
			b.Fatalf("rooms %d classes %+v", rep.Rooms, rep.Classes)
		}
		runtime.KeepAlive(c)
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/op")
	if cpu := (cputime.Process() - cpu0).Seconds(); cpu > 0 {
		b.ReportMetric(cpu/float64(b.N), "cpu-s/op")
	}
	b.ReportMetric(perRecord, "B/record")
	b.ReportMetric(perRoom, "B/room")
}

// BenchmarkCompare1M compares 1 M rooms per side.
func BenchmarkCompare1M(b *testing.B) { benchCompare(b, 1_000_000) }

// BenchmarkCompare10M compares 10 M rooms per side (target ≤ 10 s, memory
// ≤ 64 B per room and side). Skipped with -short.
func BenchmarkCompare10M(b *testing.B) {
	if testing.Short() {
		b.Skip("10 M rooms per side: run without -short")
	}
	benchCompare(b, 10_000_000)
}
