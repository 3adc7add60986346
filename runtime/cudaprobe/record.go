package cudaprobe

import (
	"encoding/binary"
	"fmt"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// RecordSize is the size of one ring-buffer record (struct record in
// bpf/cudaprobe.c). Layout, little-endian:
//
//	0   u64 cookie (spec, variant, read plan; see cookie)
//	8   u32 pid (thread group id)
//	12  u32 tid
//	16  u64 start, CLOCK_MONOTONIC ns at entry
//	24  u64 end, CLOCK_MONOTONIC ns at return
//	32  s64 ret (CUresult in the low 32 bits)
//	40  u64 args[6]
//	88  u64 rd, the word read at entry
//	96  u64 out, the word behind the out-pointer argument at return
//	104 u32 flags (FlagReadOK, FlagOutOK)
//	108 u32 padding
const RecordSize = 112

// Record flags.
const (
	FlagReadOK = 1 << 0 // Rd holds the entry-time read
	FlagOutOK  = 1 << 1 // Out holds the return-time read
	flagsKnown = FlagReadOK | FlagOutOK
)

const maxTimestamp = 1 << 62

// Record is one decoded ring-buffer record.
type Record struct {
	Cookie  uint64
	PID     uint32
	TID     uint32
	Start   uint64
	End     uint64
	Ret     int64
	Args    [6]uint64
	Rd      uint64
	Out     uint64
	Flags   uint32
	Spec    int // index into Specs
	Variant int // index into Variants
}

// Decode parses one record. The bytes come from the kernel and are treated as
// untrusted: short input, unknown spec or variant, a cookie that does not
// match its spec's read plan, unknown flags and an end before the start are
// errors naming the byte offset. Decode never panics and does not allocate.
func Decode(b []byte, r *Record) error {
	if len(b) < RecordSize {
		return fmt.Errorf("decode probe record: %d bytes, want %d", len(b), RecordSize)
	}
	le := binary.LittleEndian
	c := le.Uint64(b[0:8])
	si, v := int(c&0xffff), int((c>>16)&0xff)
	if si >= len(Specs) {
		return fmt.Errorf("decode probe record: byte 0: unknown call %d (this build knows %d)", si, len(Specs))
	}
	if v >= len(Variants) {
		return fmt.Errorf("decode probe record: byte 2: unknown symbol variant %d", v)
	}
	if c != cookie(si, v) {
		return fmt.Errorf("decode probe record: byte 0: cookie %#x does not match %s", c, names[si][v])
	}
	*r = Record{
		Cookie: c, Spec: si, Variant: v,
		PID: le.Uint32(b[8:12]), TID: le.Uint32(b[12:16]),
		Start: le.Uint64(b[16:24]), End: le.Uint64(b[24:32]),
		Ret: int64(le.Uint64(b[32:40])),
		Rd:  le.Uint64(b[88:96]), Out: le.Uint64(b[96:104]),
		Flags: le.Uint32(b[104:108]),
	}
	for i := range r.Args {
		r.Args[i] = le.Uint64(b[40+8*i:])
	}
	if r.Flags&^flagsKnown != 0 {
		return fmt.Errorf("decode probe record: byte 104: unknown flags %#x", r.Flags)
	}
	// CLOCK_MONOTONIC stays far below 2^62 ns (146 years); larger values
	// would overflow once converted to Unix time.
	if r.Start >= maxTimestamp || r.End >= maxTimestamp {
		return fmt.Errorf("decode probe record: byte 16: timestamp out of range (%d, %d)", r.Start, r.End)
	}
	if r.End < r.Start {
		return fmt.Errorf("decode probe record: byte 24: return at %d before entry at %d", r.End, r.Start)
	}
	return nil
}

// Encode writes r in the record layout (tests and the fuzz corpus); it is the
// inverse of Decode.
func (r *Record) Encode(b []byte) {
	le := binary.LittleEndian
	le.PutUint64(b[0:], r.Cookie)
	le.PutUint32(b[8:], r.PID)
	le.PutUint32(b[12:], r.TID)
	le.PutUint64(b[16:], r.Start)
	le.PutUint64(b[24:], r.End)
	le.PutUint64(b[32:], uint64(r.Ret))
	for i, a := range r.Args {
		le.PutUint64(b[40+8*i:], a)
	}
	le.PutUint64(b[88:], r.Rd)
	le.PutUint64(b[96:], r.Out)
	le.PutUint32(b[104:], r.Flags)
	le.PutUint32(b[108:], 0)
}

// Name is the symbol the record came from, e.g. "cuMemAlloc_v2".
func (r *Record) Name() string { return names[r.Spec][r.Variant] }

// Kind is the call's kind.
func (r *Record) Kind() Kind { return Specs[r.Spec].Kind }

func (r *Record) value(s src) uint64 {
	switch {
	case s >= a0 && s <= a5:
		return r.Args[s]
	case s == rd && r.Flags&FlagReadOK != 0:
		return r.Rd
	case s == out && r.Flags&FlagOutOK != 0:
		return r.Out
	}
	return 0
}

// CUDA interprets the record through its spec. monoToUnix is added to the
// kernel's CLOCK_MONOTONIC timestamps to give Unix nanoseconds.
func (r *Record) CUDA(monoToUnix int64) hook.CUDA {
	s := &Specs[r.Spec]
	return hook.CUDA{
		Call: names[r.Spec][r.Variant], PID: r.PID, TID: r.TID,
		Stream: hook.Hex64(r.value(s.Stream)), GraphExec: hook.Hex64(r.value(s.Exec)),
		Arg: hook.Hex64(r.value(s.Arg)), Bytes: r.value(s.Bytes),
		StartNS: int64(r.Start) + monoToUnix, EndNS: int64(r.End) + monoToUnix,
		Ret: int32(r.Ret),
	}
}

// KindOf maps a hook.CUDA call name (symbol with optional variant suffix) to its kind.
func KindOf(call string) Kind {
	si, _, ok := splitName(call)
	if !ok {
		return KindOther
	}
	return Specs[si].Kind
}

// BaseName strips the variant suffix: "cuMemAlloc_v2" → "cuMemAlloc".
func BaseName(call string) string {
	si, _, ok := splitName(call)
	if !ok {
		return call
	}
	return Specs[si].Base
}

// Event wraps a call as a hook.KindCUDA event stamped with the call's start.
func Event(c hook.CUDA, src hook.Source, run string) hook.Event {
	body := c
	if src.PID == 0 {
		src.PID = int32(c.PID)
	}
	return hook.Event{Kind: hook.KindCUDA, TS: c.StartNS, Src: src, Run: run, Body: &body}
}
