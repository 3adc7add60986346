package checksum

import (
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/kvlayout"
)

// NewLayersRoomEvent digests a room over several layers and returns its
// room.checksum body (SPEC.md §9): layers, layer_bsum, the combined bsum,
// xxh3 of the concatenated streams and page_bsum. The caller sets Rank,
// Stage and Request. It panics if the arguments fail CheckLayers.
func NewLayersRoomEvent(l kvlayout.Layout, layers []kvlayout.LayerArena, pages []uint32, seqLen int, room uint64, side hook.Side) *hook.RoomChecksum {
	d := kvlayout.RoomLayers(l, layers, pages, seqLen, true)
	rc := &hook.RoomChecksum{
		Room: hook.Dec64(room), Side: side, SeqLen: seqLen, Pages: len(pages),
		Bsum: hook.Hex64(d.Bsum), XXH3: hook.Hex64(d.XXH3), Dtype: l.Dtype,
		Layers: d.Layers, LayerBsum: hex64s(d.LayerBsum), PageBsum: hex64s(d.PageBsum),
	}
	return rc
}

func hex64s(v []uint64) []hook.Hex64 {
	if len(v) == 0 {
		return nil
	}
	out := make([]hook.Hex64, len(v))
	for i, x := range v {
		out[i] = hook.Hex64(x)
	}
	return out
}
