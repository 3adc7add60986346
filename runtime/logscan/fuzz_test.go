package logscan

import (
	"bytes"
	"testing"
)

// FuzzParseLine: any byte string parses without panicking into a valid kind
// whose required fields are present.
func FuzzParseLine(f *testing.F) {
	f.Add([]byte("[2025-06-01 12:00:00 TP0] Decode batch, #running-req: 60, #token: 87282, token usage: 1.00, cuda graph: True, gen throughput (token/s): 2529.33, #queue-req: 13, "))
	f.Add([]byte("[2025-06-01 12:00:07 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.4100 -> 0.7000"))
	f.Add([]byte("INFO 06-01 12:00:10 [loggers.py:123] Engine 003: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 930.1 tokens/s, Running: 64 reqs, Waiting: 12 reqs, Preemptions: 4, GPU KV cache usage: 99.8%, Prefix cache hit rate: 0.0%"))
	f.Add([]byte("[2024-10-01 09:00:00 TP0] Prefill batch(mixed #running-req: 12). #new-seq: 2, #new-token: 300"))
	f.Add([]byte("\x00\xff["))
	f.Add([]byte("[2026-03-02 10:15:07 DP0 TP3] Prefill transfer failed for request rank=3 req.rid='af2f3f99' req.bootstrap_room=6989861766352545488 with exception KVTransferError(bootstrap_room=6989861766352545488): dead"))
	f.Add([]byte("[2026-03-02 10:15:08 DP0 TP3] Decode transfer failed for request rank=3 decode_req.req.rid=\"it's\" decode_req.req.bootstrap_room=None"))
	f.Add([]byte("[2026-03-02 10:15:09 DP0 TP3] Context corruption detected: Request r (bootstrap_room=1) received metadata from bootstrap_room=2. Metadata buffer index: 17. This indicates metadata buffer index collision."))
	f.Add([]byte("[2026-03-02 10:15:00 DP0 TP3] Decode batch, #running-req: 31, #token: 61000, token usage: 0.42, accept len: 2.73, accept rate: 0.68, pre-allocated usage: 0.12, #prealloc-req: 4, #transfer-req: 6, #retracted-req: 2, cuda graph: True, gen throughput (token/s): 2210.55, #queue-req: 3, "))
	p := NewParser(Options{Year: 2025})
	f.Fuzz(func(t *testing.T, line []byte) {
		var r Record
		p.Parse(line, 1, &r)
		if r.Kind >= kindLimit {
			t.Fatalf("kind %d out of range", r.Kind)
		}
		switch r.Kind {
		case KindDecode, KindEngineStats:
			if r.Fields&FieldRunningReq == 0 {
				t.Fatalf("%s without #running-req: %q", r.Kind, line)
			}
		case KindRetract:
			if r.Fields&FieldRetracted == 0 {
				t.Fatalf("retract without count: %q", line)
			}
		case KindCanaryViolation, KindChecksumMismatch, KindPreemption:
			if r.Raw == "" {
				t.Fatalf("%s without raw line", r.Kind)
			}
		case KindTransferFailure:
			if r.Raw == "" || (r.Side != "prefill" && r.Side != "decode") || r.Rank < -1 {
				t.Fatalf("transfer failure with raw %v, side %q, rank %d", r.Raw != "", r.Side, r.Rank)
			}
			if (r.Fields&FieldRank == 0) != (r.Rank == -1) {
				t.Fatalf("rank %d with field bit %v", r.Rank, r.Fields&FieldRank != 0)
			}
		case KindMetadataCorruption:
			if r.Raw == "" || r.MetaIndex < -1 || (r.Fields&FieldIndex == 0) != (r.MetaIndex == -1) {
				t.Fatalf("metadata corruption with raw %v, index %d", r.Raw != "", r.MetaIndex)
			}
		}
		if r.AcceptLen < 0 || r.AcceptLen != r.AcceptLen || r.AcceptRate < 0 || r.AcceptRate != r.AcceptRate {
			t.Fatalf("negative or NaN accept len/rate: %+v", r)
		}
		if r.RunningReq < 0 || r.Retracted < 0 || r.TokenUsage < 0 || r.TokenUsage != r.TokenUsage {
			t.Fatalf("negative or NaN value: %+v", r)
		}
		_ = r.AppendSched(nil)
	})
}

// FuzzScan: any input scans to the end with line counts that add up.
func FuzzScan(f *testing.F) {
	f.Add([]byte(sglangSample), 64)
	f.Add([]byte(pdFailureLog), 128)
	f.Add([]byte("a\nb\r\n\n"+string(bytes.Repeat([]byte("x"), 300))+"\nDecode batch, #running-req: 1"), 16)
	f.Fuzz(func(t *testing.T, data []byte, maxLine int) {
		if maxLine < 1 || maxLine > 1<<16 {
			maxLine = 64
		}
		s, err := ScanAll(bytes.NewReader(data), "fuzz", Options{Year: 2025, MaxLine: maxLine})
		if err != nil {
			t.Fatal(err)
		}
		want := int64(bytes.Count(data, []byte("\n")))
		if len(data) > 0 && data[len(data)-1] != '\n' {
			want++
		}
		if s.Lines != want {
			t.Fatalf("lines = %d, want %d", s.Lines, want)
		}
		sum := s.Blank + s.Unrecognized + s.DecodeBatches + s.PrefillBatches + s.RetractionEvents + s.CanaryViolations + s.ChecksumMismatches +
			s.TransferFailures + s.MetadataCorruptions
		if sum > s.Lines {
			t.Fatalf("kinds add to %d > %d lines", sum, s.Lines)
		}
		if s.TransferFailedRooms > s.TransferFailures || s.MetadataCorruptedRooms > s.MetadataCorruptions ||
			s.PrefillTransferFailures+s.DecodeTransferFailures != s.TransferFailures {
			t.Fatalf("room or side counts exceed line counts: %+v", s)
		}
		if s.PD != nil && s.PD.Batches > s.DecodeBatches || s.Speculative != nil && s.Speculative.Batches > s.DecodeBatches {
			t.Fatalf("PD or speculative batches exceed %d decode batches: %+v %+v", s.DecodeBatches, s.PD, s.Speculative)
		}
	})
}
