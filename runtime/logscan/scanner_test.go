package logscan

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
)

const sglangSample = `[2025-06-01 12:00:00 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16
[2025-06-01 12:00:01 TP0] Prefill batch, #new-seq: 3, #new-token: 8192, #cached-token: 1024, token usage: 0.41, #running-req: 57, #queue-req: 9, 
[2025-06-01 12:00:02 TP0] Decode batch, #running-req: 58, #token: 80000, token usage: 0.92, cuda graph: True, gen throughput (token/s): 2600.10, #queue-req: 10, 
[2025-06-01 12:00:03 TP0] Decode batch, #running-req: 60, #token: 87282, token usage: 1.00, cuda graph: True, gen throughput (token/s): 2529.33, #queue-req: 13, 
[2025-06-01 12:00:03 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.4100 -> 0.7000

INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK
[2025-06-01 12:00:04 TP0] Decode batch, #running-req: 57, #token: 70000, token usage: 0.80, cuda graph: False, gen throughput (token/s): 2400.00, #queue-req: 4, 
[2025-06-01 12:00:05 TP0] kv_canary violation: launch_tag=HEAD_K_FULL fail_reason=position slot_idx=1 position=2 stored_token=3 expected_token=4 stored_chain_hash=0x1 expected_aux=0x2
[2025-06-01 12:00:06 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 646, #new_token_ratio: 0.0980 -> 0.3487
[2025-06-01 12:00:07 TP0] Abort: KV checksum mismatch for bootstrap_room=77
garbage ` + "\x00\x01\xff" + `
[2025-06-01 12:00:08 TP0] Decode batch, #running-req: 12, #token: 9000, token usage: 0.10, cuda graph: True, gen throughput (token/s): 900.00, #queue-req: 0, `

func TestScanAllSGLang(t *testing.T) {
	// The same log through readers that hand out one byte at a time and
	// half-reads must give the same summary.
	readers := map[string]func() io.Reader{
		"whole":    func() io.Reader { return strings.NewReader(sglangSample) },
		"one-byte": func() io.Reader { return iotest.OneByteReader(strings.NewReader(sglangSample)) },
		"half":     func() io.Reader { return iotest.HalfReader(strings.NewReader(sglangSample)) },
	}
	for name, mk := range readers {
		t.Run(name, func(t *testing.T) {
			s, err := ScanAll(mk(), "server.log", Options{Year: 2025})
			if err != nil {
				t.Fatal(err)
			}
			checks := []struct {
				name      string
				got, want int64
			}{
				{"lines", s.Lines, 13},
				{"decode_batches", s.DecodeBatches, 4},
				{"prefill_batches", s.PrefillBatches, 1},
				{"peak_running_req", int64(s.PeakRunningReq), 60},
				{"retraction_events", s.RetractionEvents, 2},
				{"retracted_reqs", s.RetractedReqs, 4},
				{"canary_violations", s.CanaryViolations, 1},
				{"checksum_mismatches", s.ChecksumMismatches, 1},
				{"preemptions", s.Preemptions, 0},
				{"unrecognized", s.Unrecognized, 3},
				{"blank", s.Blank, 1},
				{"cuda_graph_batches", s.CUDAGraphBatches, 3},
				{"peak_queue_req", int64(s.PeakQueueReq), 13},
			}
			for _, c := range checks {
				if c.got != c.want {
					t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
				}
			}
			if s.PeakTokenUsage != 1.0 {
				t.Errorf("peak token usage = %v, want 1", s.PeakTokenUsage)
			}
			if s.Format != "sglang" {
				t.Errorf("format = %q", s.Format)
			}
			if len(s.Retractions) != 2 {
				t.Fatalf("retractions = %+v", s.Retractions)
			}
			r := s.Retractions[0]
			if r.Line != 5 || r.Time != "2025-06-01T12:00:03Z" || r.Retracted != 3 || r.TokenUsage != 1.0 || r.RunningReq != 60 || r.NewTokenRatio != [2]float64{0.41, 0.7} {
				t.Errorf("first retraction = %+v", r)
			}
			if s.Start != "2025-06-01T12:00:00Z" || s.End != "2025-06-01T12:00:08Z" {
				t.Errorf("span = %s .. %s", s.Start, s.End)
			}
			if len(s.CanaryLines) != 1 || !strings.Contains(s.CanaryLines[0].Text, "launch_tag=HEAD_K_FULL") || s.CanaryLines[0].Line != 9 {
				t.Errorf("canary lines = %+v", s.CanaryLines)
			}
		})
	}
}

func TestScanAllVLLM(t *testing.T) {
	log := `INFO 06-01 12:00:00 [api_server.py:1000] Starting vLLM API server
INFO 06-01 12:00:10 [loggers.py:123] Engine 000: Avg prompt throughput: 1520.3 tokens/s, Avg generation throughput: 812.4 tokens/s, Running: 48 reqs, Waiting: 3 reqs, GPU KV cache usage: 87.5%, Prefix cache hit rate: 41.2%
INFO 06-01 12:00:20 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 930.1 tokens/s, Running: 64 reqs, Waiting: 12 reqs, Preemptions: 4, GPU KV cache usage: 99.8%, Prefix cache hit rate: 0.0%
WARNING 06-01 12:00:21 [scheduler.py:1754] Sequence group 7 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space.
INFO 06-01 12:00:30 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 10.0 tokens/s, Running: 2 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%
`
	s, err := ScanAll(strings.NewReader(log), "vllm.log", Options{Year: 2025})
	if err != nil {
		t.Fatal(err)
	}
	if s.Format != "vllm" || s.Lines != 5 || s.DecodeBatches != 3 || s.PeakRunningReq != 64 || s.PeakTokenUsage != 0.998 ||
		s.Preemptions != 5 || s.Unrecognized != 1 || s.RetractionEvents != 0 || len(s.PreemptionLines) != 1 {
		t.Errorf("summary = %+v", s)
	}
}

func TestScannerLongLinesAndEOF(t *testing.T) {
	long := strings.Repeat("x", 5000)
	in := "Decode batch, #running-req: 1, \n" + long + "\n" + "Decode batch, #running-req: 2, \n" + long + long + "\nDecode batch, #running-req: 3, "
	sc := NewScanner(iotest.HalfReader(strings.NewReader(in)), "in", Options{MaxLine: 1024})
	var kinds []string
	var running []int
	longs := 0
	for sc.Scan() {
		r := sc.Record()
		kinds = append(kinds, r.Kind.String())
		if r.Long {
			longs++
		}
		if r.Kind == KindDecode {
			running = append(running, r.RunningReq)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(kinds, ","); got != "decode,unrecognized,decode,unrecognized,decode" {
		t.Fatalf("kinds = %s", got)
	}
	if longs != 2 || len(running) != 3 || running[2] != 3 {
		t.Fatalf("longs=%d running=%v", longs, running)
	}
}

// A kv_canary violation on a line over MaxLine is still found: its head is
// parsed, as canary.ScanLog does (issue 19 item 13).
func TestScannerLongViolationLine(t *testing.T) {
	v := "[2026-11-29 08:00:06 TP0] kv_canary violation: launch_tag=HEAD_K_FULL fail_reason=chain_hash slot_idx=1 position=2 stored_token=3 expected_token=4 stored_chain_hash=0x1 expected_aux=0x2 "
	for _, tail := range []string{"\n", ""} { // with and without a final newline
		in := "Decode batch, #running-req: 1, \n" + v + strings.Repeat("p", 3<<20) + tail + "\nDecode batch, #running-req: 2, \n"
		sum, err := ScanAll(iotest.HalfReader(strings.NewReader(in)), "in", Options{})
		if err != nil {
			t.Fatal(err)
		}
		if sum.CanaryViolations != 1 || sum.LongLines != 1 || sum.DecodeBatches != 2 {
			t.Errorf("violations %d, long lines %d, decode batches %d; want 1, 1, 2", sum.CanaryViolations, sum.LongLines, sum.DecodeBatches)
		}
	}
}

var errDisk = errors.New("disk on fire")

func TestScannerReadErrorNamesInput(t *testing.T) {
	r := io.MultiReader(strings.NewReader("Decode batch, #running-req: 1, \npartial"), iotest.ErrReader(errDisk))
	s, err := ScanAll(r, "/var/log/sglang.log", Options{})
	if !errors.Is(err, errDisk) || !strings.Contains(err.Error(), "read /var/log/sglang.log at byte 39:") {
		t.Fatalf("err = %v", err)
	}
	if s.DecodeBatches != 1 || s.Lines != 2 {
		t.Fatalf("summary before the error lost: %+v", s)
	}
}

func TestScannerFollowHoldsPartialLine(t *testing.T) {
	var buf bytes.Buffer
	sc := NewScanner(&buf, "f", Options{})
	sc.SetFollow(true)
	buf.WriteString("Decode batch, #running-req: 1, \nDecode batch, #runn")
	if !sc.Scan() || sc.Record().RunningReq != 1 {
		t.Fatal("first line not returned")
	}
	if sc.Scan() {
		t.Fatalf("partial line returned early: %+v", sc.Record())
	}
	buf.WriteString("ing-req: 9, \n")
	if !sc.Scan() || sc.Record().RunningReq != 9 || sc.Record().Line != 2 {
		t.Fatalf("completed line = %+v", sc.Record())
	}
	buf.WriteString("Decode batch, #running-req: 4")
	if sc.Scan() {
		t.Fatal("partial returned")
	}
	if !sc.Flush() || sc.Record().RunningReq != 4 {
		t.Fatal("flush lost the partial line")
	}
}

func TestFixturesScan(t *testing.T) {
	// Every committed fixture log scans without error and recognizes lines.
	files, _ := filepath.Glob("testdata/*.log")
	if len(files) == 0 {
		t.Fatal("no fixtures in testdata")
	}
	for _, fn := range files {
		f, err := os.Open(fn)
		if err != nil {
			t.Fatal(err)
		}
		s, err := ScanAll(f, fn, Options{Year: 2025})
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if s.DecodeBatches == 0 || s.Format == "unknown" {
			t.Errorf("%s: %+v", fn, s)
		}
	}
}

func TestFormatFromPrefixAlone(t *testing.T) {
	s, _ := ScanAll(strings.NewReader("[2025-06-01 12:00:00 TP0] Load weight begin.\n[2025-06-01 12:00:01 TP0] Load weight end.\n"), "x", Options{})
	if s.Format != "sglang" || s.Unrecognized != 2 {
		t.Errorf("sglang by prefix: %+v", s)
	}
	s, _ = ScanAll(strings.NewReader("INFO 06-01 12:00:00 [api_server.py:1] Starting vLLM API server\n"), "x", Options{Year: 2025})
	if s.Format != "vllm" {
		t.Errorf("vllm by prefix: %+v", s)
	}
	s, _ = ScanAll(strings.NewReader("hello\nworld\n"), "x", Options{})
	if s.Format != "unknown" {
		t.Errorf("plain text: %+v", s)
	}
}
