package cudaprobe

import (
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/cputime"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

func rec(call string) Record {
	si, v, ok := splitName(call)
	if !ok {
		panic("unknown call " + call)
	}
	return Record{Cookie: cookie(si, v), Spec: si, Variant: v, PID: 7, TID: 8, Start: 100, End: 150}
}

func encode(r Record) []byte {
	b := make([]byte, RecordSize)
	r.Encode(b)
	return b
}

func TestDecodeInterpretsThroughSpec(t *testing.T) {
	lk := rec("cuLaunchKernel_ptsz")
	lk.Args = [6]uint64{0xF1, 1, 1, 1, 128, 1}
	lk.Rd, lk.Flags = 0xA0, FlagReadOK
	end := rec("cuStreamEndCapture")
	end.Args[0], end.Args[1], end.Out, end.Flags = 0xA0, 0x7ffc0000, 0x6010, FlagOutOK
	inst := rec("cuGraphInstantiateWithFlags")
	inst.Args[0], inst.Args[1], inst.Out, inst.Flags = 0x7ffc0008, 0x6010, 0x6110, FlagOutOK
	alloc := rec("cuMemAlloc_v2")
	alloc.Args[1], alloc.Out = 4096, 0xdead // out not flagged OK: must not be used
	peer := rec("cuMemcpyPeerAsync")
	peer.Args = [6]uint64{0x1, 0x2, 0x3, 0x4, 512, 0xB0}
	free := rec("cuMemFree_v2")
	free.Args[0], free.Ret = 0xD0, -1<<40|1 // CUresult is the low 32 bits
	for _, tc := range []struct {
		r    Record
		want hook.CUDA
	}{
		{lk, hook.CUDA{Call: "cuLaunchKernel_ptsz", Stream: 0xA0, Arg: 0xF1}},
		{end, hook.CUDA{Call: "cuStreamEndCapture", Stream: 0xA0, Arg: 0x6010}},
		{inst, hook.CUDA{Call: "cuGraphInstantiateWithFlags", GraphExec: 0x6110, Arg: 0x6010}},
		{alloc, hook.CUDA{Call: "cuMemAlloc_v2", Bytes: 4096}},
		{peer, hook.CUDA{Call: "cuMemcpyPeerAsync", Stream: 0xB0, Arg: 0x1, Bytes: 512}},
		{free, hook.CUDA{Call: "cuMemFree_v2", Arg: 0xD0, Ret: 1}},
	} {
		var got Record
		if err := Decode(encode(tc.r), &got); err != nil {
			t.Fatalf("%s: %v", tc.want.Call, err)
		}
		c := got.CUDA(1000)
		tc.want.PID, tc.want.TID, tc.want.StartNS, tc.want.EndNS = 7, 8, 1100, 1150
		if c != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.want.Call, c, tc.want)
		}
	}
}

func TestEvent(t *testing.T) {
	c := hook.CUDA{Call: "cuGraphLaunch", PID: 9, StartNS: 123, Stream: 0xA}
	ev := Event(c, hook.Source{Proc: "cudaprobe"}, "r")
	c.Stream = 0xB // the event holds its own copy
	if ev.Kind != hook.KindCUDA || ev.TS != 123 || ev.Run != "r" || ev.Src.PID != 9 || ev.Body.(*hook.CUDA).Stream != 0xA {
		t.Fatalf("%+v", ev)
	}
	if _, err := ev.MarshalJSON(); err != nil {
		t.Fatal(err)
	}
}

func TestDecodeRejectsBadRecords(t *testing.T) {
	good := rec("cuGraphLaunch")
	mut := func(f func(b []byte)) []byte { b := encode(good); f(b); return b }
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "0 bytes, want 112"},
		{"short", encode(good)[:111], "111 bytes, want 112"},
		{"unknown spec", mut(func(b []byte) { b[0], b[1] = 0xff, 0x7f }), "byte 0: unknown call 32767"},
		{"unknown variant", mut(func(b []byte) { b[2] = 200 }), "byte 2: unknown symbol variant 200"},
		{"cookie plan mismatch", mut(func(b []byte) { b[3] = 0x10 }), "byte 0: cookie 0x10000000 does not match cuGraphLaunch"},
		{"unknown flags", mut(func(b []byte) { b[104] = 0x80 }), "byte 104: unknown flags 0x80"},
		{"end before start", mut(func(b []byte) { b[24] = 1 }), "byte 24: return at 1 before entry at 100"},
		{"timestamp overflow", mut(func(b []byte) { b[31] = 0x80 }), "byte 16: timestamp out of range"},
	} {
		var r Record
		err := Decode(tc.b, &r)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Decode = %v, want %q", tc.name, err, tc.want)
		}
	}
	// Longer input is fine: the ring buffer may pad records to 8 bytes.
	var r Record
	if err := Decode(append(encode(good), 0, 0, 0, 0), &r); err != nil || r.Name() != "cuGraphLaunch" {
		t.Fatalf("padded record: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(encode(rec("cuGraphLaunch")))
	f.Add(encode(rec("cuLaunchKernel"))[:57])
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Record
		if err := Decode(b, &r); err != nil {
			return
		}
		c := r.CUDA(0)
		if c.Call == "" || c.Call != r.Name() || KindOf(c.Call) != r.Kind() {
			t.Fatalf("decoded record without a consistent name: %+v", r)
		}
		if c.EndNS < c.StartNS {
			t.Fatalf("end before start accepted")
		}
		again := make([]byte, RecordSize)
		r.Encode(again)
		want := append([]byte(nil), b[:RecordSize]...)
		clear(want[108:112]) // padding is not kept
		if string(again) != string(want) {
			t.Fatalf("round trip differs:\n%x\n%x", again, want)
		}
	})
}

// BenchmarkDecode decodes ring-buffer records into hook.CUDA values, the
// user-space cost per traced call. Target: ≥ 5 M events/s.
func BenchmarkDecode(b *testing.B) {
	calls := []string{"cuLaunchKernel", "cuGraphLaunch_ptsz", "cuEventRecord", "cuStreamWaitEvent",
		"cuMemcpyHtoDAsync_v2", "cuStreamEndCapture", "cuMemAlloc_v2", "cuGraphInstantiateWithFlags"}
	buf := make([]byte, 0, 1024*RecordSize)
	for i := range 1024 {
		r := rec(calls[i%len(calls)])
		r.Args = [6]uint64{uint64(i), 2, 3, 4, 5, 6}
		r.Rd, r.Out, r.Flags = 0xA0, 0x6010, FlagReadOK|FlagOutOK
		buf = append(buf, encode(r)...)
	}
	var r Record
	var sink hook.CUDA
	b.ReportAllocs()
	b.SetBytes(RecordSize)
	start, cpu0 := time.Now(), cputime.Process()
	for i := 0; b.Loop(); i++ {
		off := (i & 1023) * RecordSize
		if err := Decode(buf[off:off+RecordSize], &r); err != nil {
			b.Fatal(err)
		}
		sink = r.CUDA(1)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
	if cpu := cputime.Process() - cpu0; cpu > 0 {
		b.ReportMetric(float64(b.N)/cpu.Seconds(), "events/cpu-s")
	}
	_ = sink
}
