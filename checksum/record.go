package checksum

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/kvlayout"
)

// Record is one side's checksum of one room, from any input: a room.checksum
// event, a kvcanary room_checksum log line, or (Evidence) an SGLang
// "KV checksum mismatch" abort, which carries no digests.
type Record struct {
	Room     uint64
	Side     hook.Side
	SeqLen   int
	Pages    int
	Bsum     uint64
	XXH3     uint64
	Dtype    string
	PageXXH3 []uint64 // RoomPages digests, page-table order; may be empty
	Request  string

	// Spec v1.1 (SPEC.md §9). Rank and Stage say which digest this is among
	// a room's several on one side; Node is the host the event came from
	// (src.node; "" for log lines). Layers/LayerBsum are parallel; PageBsum
	// has one entry per page-table entry. All may be empty.
	Rank      int
	Stage     string
	Node      string
	Layers    []int
	LayerBsum []uint64
	PageBsum  []uint64

	// Evidence marks an engine's own mismatch report (SGLang's abort). Its
	// digests are zero; HasRoom says whether the line named the room.
	Evidence bool
	HasRoom  bool

	Line int64 // 1-based line (log) or event index (bundle) in its input
}

// RecordFromEvent converts a room.checksum event body to a Record. The
// returned record shares rc's layer ids. Node is left empty (the caller
// knows the envelope).
func RecordFromEvent(rc *hook.RoomChecksum) (Record, error) {
	if rc.Side != hook.SidePrefill && rc.Side != hook.SideDecode {
		return Record{}, fmt.Errorf("room %d: side %q is neither prefill nor decode", uint64(rc.Room), rc.Side)
	}
	if rc.SeqLen < 0 || rc.Pages < 0 {
		return Record{}, fmt.Errorf("room %d: negative seq_len %d or pages %d", uint64(rc.Room), rc.SeqLen, rc.Pages)
	}
	if err := (&hook.Event{Kind: hook.KindRoomChecksum, Body: rc}).Validate(); err != nil {
		return Record{}, fmt.Errorf("room %d: %w", uint64(rc.Room), err)
	}
	r := Record{
		Room: uint64(rc.Room), Side: rc.Side, SeqLen: rc.SeqLen, Pages: rc.Pages,
		Bsum: uint64(rc.Bsum), XXH3: uint64(rc.XXH3), Dtype: rc.Dtype, Request: rc.Request, HasRoom: true,
		Rank: rc.Rank, Stage: rc.Stage, Layers: rc.Layers,
		PageXXH3: u64s(rc.PageSum), LayerBsum: u64s(rc.LayerBsum), PageBsum: u64s(rc.PageBsum),
	}
	return r, nil
}

func u64s(v []hook.Hex64) []uint64 {
	if len(v) == 0 {
		return nil
	}
	out := make([]uint64, len(v))
	for i, h := range v {
		out[i] = uint64(h)
	}
	return out
}

// Event returns the room.checksum event body of a digest record.
func (r *Record) Event() *hook.RoomChecksum {
	rc := &hook.RoomChecksum{
		Room: hook.Dec64(r.Room), Side: r.Side, SeqLen: r.SeqLen, Pages: r.Pages,
		Bsum: hook.Hex64(r.Bsum), XXH3: hook.Hex64(r.XXH3), Dtype: r.Dtype, Request: r.Request,
		Rank: r.Rank, Stage: r.Stage, Layers: slices.Clone(r.Layers),
		PageSum: hex64s(r.PageXXH3), LayerBsum: hex64s(r.LayerBsum), PageBsum: hex64s(r.PageBsum),
	}
	return rc
}

// NewRoomEvent digests a room and returns its room.checksum body, with the
// per-page digests (RoomPages) a compare needs to locate a mismatch. This is
// the one call an engine-side hook (or the twin) makes per room and side.
func NewRoomEvent(l kvlayout.Layout, arena []byte, pages []uint32, seqLen int, room uint64, side hook.Side) *hook.RoomChecksum {
	d := kvlayout.Room(l, arena, pages, seqLen)
	rc := &hook.RoomChecksum{
		Room: hook.Dec64(room), Side: side, SeqLen: seqLen, Pages: len(pages),
		Bsum: hook.Hex64(d.Bsum), XXH3: hook.Hex64(d.XXH3), Dtype: l.Dtype,
	}
	for _, v := range kvlayout.RoomPages(l, arena, pages, seqLen, nil) {
		rc.PageSum = append(rc.PageSum, hook.Hex64(v))
	}
	return rc
}

// AppendLogLine appends the SPEC.md §6 log line of a digest record (without a
// newline): digests in 0x-hex; rank, stage, layers and the page and layer
// digests when present.
func AppendLogLine(b []byte, r *Record) []byte {
	b = append(b, "kvcanary room_checksum side="...)
	b = append(b, r.Side...)
	b = fmt.Appendf(b, " room=%d seq_len=%d pages=%d bsum=", r.Room, r.SeqLen, r.Pages)
	b = hook.AppendHex64(b, r.Bsum)
	b = append(b, " xxh3="...)
	b = hook.AppendHex64(b, r.XXH3)
	if r.Dtype != "" {
		b = append(b, " dtype="...)
		b = append(b, r.Dtype...)
	}
	if r.Rank != 0 {
		b = fmt.Appendf(b, " rank=%d", r.Rank)
	}
	if r.Stage != "" {
		b = append(b, " stage="...)
		b = append(b, r.Stage...)
	}
	if len(r.Layers) > 0 {
		b = append(b, " layers="...)
		for i, l := range r.Layers {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(l), 10)
		}
	}
	b = appendDigests(b, " page_xxh3=", r.PageXXH3)
	b = appendDigests(b, " layer_bsum=", r.LayerBsum)
	b = appendDigests(b, " page_bsum=", r.PageBsum)
	return b
}

func appendDigests(b []byte, key string, v []uint64) []byte {
	if len(v) == 0 {
		return b
	}
	b = append(b, key...)
	for i, x := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = hook.AppendHex64(b, x)
	}
	return b
}
