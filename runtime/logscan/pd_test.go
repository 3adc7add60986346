package logscan

import (
	"encoding/json"
	"strings"
	"testing"
)

// The exact shapes of SGLang's PD failure lines (disaggregation/prefill.py,
// decode.py: Python f-strings with "{x=}", so the rid is a repr) behind
// SGLang's "[date time DPn TPn] " prefix.
func TestParsePDFailures(t *testing.T) {
	type pd struct {
		kind          Kind
		side          string
		rank          int
		rid           string
		room, from    uint64
		index         int
		reason        string
		bad           int
		ts            int64
		fieldsMissing uint32
	}
	cases := []struct {
		name string
		line string
		want pd
	}{
		{"prefill-transfer-failed", "[2026-03-02 10:15:07 DP0 TP3] Prefill transfer failed for request rank=3 req.rid='af2f3f99db344fab9f0598c637f163fe' req.bootstrap_room=6989861766352545488 with exception KVTransferError(bootstrap_room=6989861766352545488): Decode instance could be dead, remote mooncake session 10.82.101.249:16324 is not alive",
			pd{kind: KindTransferFailure, side: "prefill", rank: 3, rid: "af2f3f99db344fab9f0598c637f163fe", room: 6989861766352545488,
				reason: "KVTransferError(bootstrap_room=6989861766352545488): Decode instance could be dead, remote mooncake session 10.82.101.249:16324 is not alive",
				ts:     ts("2026-03-02 10:15:07.000"), index: -1}},
		{"decode-transfer-failed", "[2026-03-02 10:15:08 DP0 TP3] Decode transfer failed for request rank=3 decode_req.req.rid='9fc62257c8194d659c81fff52e976f03' decode_req.req.bootstrap_room=3513979088676517362 with exception KVTransferError(bootstrap_room=3513979088676517362): Failed to get kvcache from prefill instance, it might be dead",
			pd{kind: KindTransferFailure, side: "decode", rank: 3, rid: "9fc62257c8194d659c81fff52e976f03", room: 3513979088676517362,
				reason: "KVTransferError(bootstrap_room=3513979088676517362): Failed to get kvcache from prefill instance, it might be dead",
				ts:     ts("2026-03-02 10:15:08.000"), index: -1}},
		{"decode-transfer-failed-no-exception", "[2026-03-02 10:15:08 DP1 TP0] Decode transfer failed for request rank=0 decode_req.req.rid='r1' decode_req.req.bootstrap_room=7",
			pd{kind: KindTransferFailure, side: "decode", rank: 0, rid: "r1", room: 7, ts: ts("2026-03-02 10:15:08.000"), index: -1}},
		{"rid-repr-with-quote-and-space", `[2026-03-02 10:15:08 TP0] Prefill transfer failed for request rank=0 req.rid="it's a b" req.bootstrap_room=18446744073709551615`,
			pd{kind: KindTransferFailure, side: "prefill", rank: 0, rid: "it's a b", room: 18446744073709551615, ts: ts("2026-03-02 10:15:08.000"), index: -1}},
		{"room-none", "[2026-03-02 10:15:08 TP0] Prefill transfer failed for request rank=1 req.rid='x' req.bootstrap_room=None",
			pd{kind: KindTransferFailure, side: "prefill", rank: 1, rid: "x", bad: 1, ts: ts("2026-03-02 10:15:08.000"), index: -1, fieldsMissing: FieldRoom}},
		{"transfer-bad-rank-and-room", "[2026-03-02 10:15:08 TP0] Decode transfer failed for request rank=x decode_req.req.rid='r' decode_req.req.bootstrap_room=99999999999999999999",
			pd{kind: KindTransferFailure, side: "decode", rank: -1, rid: "r", bad: 4, ts: ts("2026-03-02 10:15:08.000"), index: -1, fieldsMissing: FieldRank | FieldRoom}},
		{"transfer-inside-json-error", `{"error":{"code":"decode_internal_error","message":"Decode transfer failed for request rank=0 decode_req.req.rid='9f' decode_req.req.bootstrap_room=35 with exception KVTransferError(bootstrap_room=35): x"}}`,
			pd{kind: KindTransferFailure, side: "decode", rank: 0, rid: "9f", room: 35, reason: `KVTransferError(bootstrap_room=35): x"}}`, index: -1}},
		{"context-corruption", "[2026-03-02 10:15:09 DP0 TP3] Context corruption detected: Request 5d0c1f2e9a (bootstrap_room=1234567890123456789) received metadata from bootstrap_room=987654321. Metadata buffer index: 17. This indicates metadata buffer index collision.",
			pd{kind: KindMetadataCorruption, rid: "5d0c1f2e9a", room: 1234567890123456789, from: 987654321, index: 17, ts: ts("2026-03-02 10:15:09.000")}},
		{"context-corruption-journald", "Mar 02 10:15:09 gpu7 python3[42]: [2026-03-02 10:15:09 TP0] Context corruption detected: Request a (b) (bootstrap_room=1) received metadata from bootstrap_room=2. Metadata buffer index: 0. This indicates metadata buffer index collision.",
			pd{kind: KindMetadataCorruption, rid: "a (b)", room: 1, from: 2, index: 0, ts: ts("2026-03-02 10:15:09.000")}},
		{"context-corruption-cut", "[2026-03-02 10:15:09 TP0] Context corruption detected: Request r (bootstrap_room=5) received metadata",
			pd{kind: KindMetadataCorruption, rid: "r", room: 5, index: -1, bad: 2, ts: ts("2026-03-02 10:15:09.000"), fieldsMissing: FieldFrom | FieldIndex}},
	}
	p := NewParser(Options{})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r Record
			p.Parse([]byte(c.line), 5, &r)
			w := c.want
			if r.Kind != w.kind || r.Engine != EngineSGLang || r.Side != w.side || r.Rid != w.rid || r.Room != w.room ||
				r.FromRoom != w.from || r.FailureText != w.reason || r.BadFields != w.bad || r.TS != w.ts || r.Raw != c.line || r.Line != 5 {
				t.Fatalf("got kind %s side %q rank %d rid %q room %d from %d index %d reason %q bad %d ts %d raw %v\nwant %+v",
					r.Kind, r.Side, r.Rank, r.Rid, r.Room, r.FromRoom, r.MetaIndex, r.FailureText, r.BadFields, r.TS, r.Raw == c.line, w)
			}
			if w.kind == KindTransferFailure && r.Rank != w.rank {
				t.Errorf("rank %d, want %d", r.Rank, w.rank)
			}
			if w.kind == KindMetadataCorruption && r.MetaIndex != w.index {
				t.Errorf("index %d, want %d", r.MetaIndex, w.index)
			}
			if r.Fields&w.fieldsMissing != 0 {
				t.Errorf("fields %b include %b", r.Fields, w.fieldsMissing)
			}
			if s := r.AppendSched(nil); len(s) != 0 {
				t.Errorf("a PD failure is no scheduler observation: %+v", s)
			}
		})
	}
}

// The PD decode queue and speculative fields, in SGLang's order
// ([accept len, accept rate, ][pre-allocated usage, #prealloc-req,
// #transfer-req, #retracted-req, ]cuda graph).
func TestParseDecodeExtras(t *testing.T) {
	p := NewParser(Options{})
	var r Record
	line := "[2026-03-02 10:15:00 DP0 TP3] Decode batch, #running-req: 31, #token: 61000, token usage: 0.42, accept len: 2.73, accept rate: 0.68, pre-allocated usage: 0.12, #prealloc-req: 4, #transfer-req: 6, #retracted-req: 2, cuda graph: True, gen throughput (token/s): 2210.55, #queue-req: 3, "
	p.Parse([]byte(line), 1, &r)
	if r.Kind != KindDecode || r.RunningReq != 31 || r.AcceptLen != 2.73 || r.AcceptRate != 0.68 || r.PreallocUsage != 0.12 ||
		r.PreallocReq != 4 || r.TransferReq != 6 || r.RetractedQueue != 2 || !r.CUDAGraph || r.QueueReq != 3 || r.BadFields != 0 {
		t.Fatalf("%+v", r)
	}
	if r.Fields&(FieldAcceptLen|FieldAcceptRate|FieldPrealloc) != FieldAcceptLen|FieldAcceptRate|FieldPrealloc {
		t.Fatalf("fields %b", r.Fields)
	}
	p.Parse([]byte("[2026-03-02 10:15:00 TP0] Decode batch, #running-req: 1, #token: 10, token usage: 0.01, accept len: many, cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0, "), 2, &r)
	if r.Kind != KindDecode || r.BadFields != 1 || r.Fields&FieldAcceptLen != 0 {
		t.Fatalf("bad accept len: %+v", r)
	}
}

const pdFailureLog = `[2026-03-02 10:15:00 DP0 TP0] Decode batch, #running-req: 30, #token: 60000, token usage: 0.40, accept len: 3.00, accept rate: 0.75, pre-allocated usage: 0.10, #prealloc-req: 4, #transfer-req: 6, #retracted-req: 0, cuda graph: True, gen throughput (token/s): 2000.00, #queue-req: 3, 
[2026-03-02 10:15:02 DP0 TP0] Decode batch, #running-req: 32, #token: 62000, token usage: 0.45, accept len: 2.00, accept rate: 0.50, pre-allocated usage: 0.30, #prealloc-req: 2, #transfer-req: 9, #retracted-req: 1, cuda graph: True, gen throughput (token/s): 2100.00, #queue-req: 1, 
[2026-03-02 10:15:03 DP0 TP0] Decode transfer failed for request rank=0 decode_req.req.rid='r1' decode_req.req.bootstrap_room=111 with exception KVTransferError(bootstrap_room=111): Failed to get kvcache from prefill instance, it might be dead
[2026-03-02 10:15:03 DP0 TP1] Decode transfer failed for request rank=1 decode_req.req.rid='r1' decode_req.req.bootstrap_room=111 with exception KVTransferError(bootstrap_room=111): Failed to get kvcache from prefill instance, it might be dead
[2026-03-02 10:15:04 DP0 TP3] Prefill transfer failed for request rank=3 req.rid='r2' req.bootstrap_room=222
[2026-03-02 10:15:05 DP0 TP0] Context corruption detected: Request r3 (bootstrap_room=333) received metadata from bootstrap_room=444. Metadata buffer index: 7. This indicates metadata buffer index collision.
[2026-03-02 10:15:05 DP0 TP1] Context corruption detected: Request r3 (bootstrap_room=333) received metadata from bootstrap_room=444. Metadata buffer index: 7. This indicates metadata buffer index collision.
[2026-03-02 10:15:06 DP0 TP0] Decode batch, #running-req: 28, #token: 58000, token usage: 0.39, cuda graph: True, gen throughput (token/s): 1900.00, #queue-req: 0, 
`

func TestSummaryPDFailures(t *testing.T) {
	s, err := ScanAll(strings.NewReader(pdFailureLog), "pd.log", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.TransferFailures != 3 || s.DecodeTransferFailures != 2 || s.PrefillTransferFailures != 1 || s.TransferFailedRooms != 2 {
		t.Errorf("transfer failures %d (decode %d, prefill %d) over %d rooms; want 3 (2, 1) over 2",
			s.TransferFailures, s.DecodeTransferFailures, s.PrefillTransferFailures, s.TransferFailedRooms)
	}
	if s.MetadataCorruptions != 2 || s.MetadataCorruptedRooms != 1 || s.Unrecognized != 0 || s.DecodeBatches != 3 || s.Format != "sglang" {
		t.Errorf("corruptions %d over %d rooms, unrecognized %d, decode %d, format %s",
			s.MetadataCorruptions, s.MetadataCorruptedRooms, s.Unrecognized, s.DecodeBatches, s.Format)
	}
	if len(s.TransferFailureLines) != 3 || s.TransferFailureLines[2] != (TransferFailure{Line: 5, Time: "2026-03-02T10:15:04Z", Side: "prefill", Rank: 3, Rid: "r2", Room: 222}) {
		t.Errorf("transfer failure lines %+v", s.TransferFailureLines)
	}
	if len(s.MetadataCorruptionLines) != 2 || s.MetadataCorruptionLines[0] != (MetadataCorruption{Line: 6, Time: "2026-03-02T10:15:05Z", Rid: "r3", Room: 333, FromRoom: 444, BufferIndex: 7}) {
		t.Errorf("metadata corruption lines %+v", s.MetadataCorruptionLines)
	}
	if s.PD == nil || *s.PD != (PDDecode{Batches: 2, PeakPreallocReq: 4, PeakTransferReq: 9, PeakRetractedReq: 1, PeakPreallocUsage: 0.30}) {
		t.Errorf("pd %+v", s.PD)
	}
	if sp := s.Speculative; sp == nil || sp.Batches != 2 || sp.AvgAcceptLen != 2.5 || sp.MinAcceptLen != 2 || sp.AvgAcceptRate != 0.625 || sp.MinAcceptRate != 0.5 {
		t.Errorf("speculative %+v", s.Speculative)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`"transfer_failures":3`, `"metadata_corruptions":2`, `"bootstrap_room":"333"`, `"from_bootstrap_room":"444"`,
		`"metadata_buffer_index":7`, `"pd_decode":{"batches":2,`, `"speculative":{"batches":2,"avg_accept_len":2.5,`} {
		if !strings.Contains(string(b), w) {
			t.Errorf("json lacks %s:\n%s", w, b)
		}
	}

	// A snapshot is a deep copy: later lines do not change it.
	c := s.Clone()
	var r Record
	NewParser(Options{}).Parse([]byte("Decode batch, #running-req: 1, accept len: 9.00, #prealloc-req: 99"), 9, &r)
	s.Add(&r)
	if c.PD.PeakPreallocReq != 4 || c.Speculative.Batches != 2 || s.PD.PeakPreallocReq != 99 {
		t.Errorf("clone shares state: clone %+v %+v, original %+v", c.PD, c.Speculative, s.PD)
	}
}

// Without PD or speculative fields nothing is reported as measured.
func TestSummaryNoPDFields(t *testing.T) {
	s, err := ScanAll(strings.NewReader("[2026-03-02 10:15:06 TP0] Decode batch, #running-req: 28, #token: 58000, token usage: 0.39, cuda graph: True, gen throughput (token/s): 1900.00, #queue-req: 0, \n"), "x", Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(s)
	if s.PD != nil || s.Speculative != nil || strings.Contains(string(b), "pd_decode") || strings.Contains(string(b), "speculative") {
		t.Fatalf("unmeasured fields reported: %s", b)
	}
}
