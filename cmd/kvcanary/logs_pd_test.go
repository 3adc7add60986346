package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/repro"
	"github.com/kvcanary/kvcanary/runtime/logscan"
)

// SGLang PD failure lines and decode fields, as a PD decode server logs them.
const logsPDFixture = `[2026-03-02 10:15:00 DP0 TP3] Decode batch, #running-req: 30, #token: 60000, token usage: 0.40, accept len: 3.00, accept rate: 0.75, pre-allocated usage: 0.10, #prealloc-req: 4, #transfer-req: 6, #retracted-req: 0, cuda graph: True, gen throughput (token/s): 2000.00, #queue-req: 3, 
[2026-03-02 10:15:02 DP0 TP3] Decode batch, #running-req: 32, #token: 62000, token usage: 0.45, accept len: 2.00, accept rate: 0.50, pre-allocated usage: 0.30, #prealloc-req: 2, #transfer-req: 9, #retracted-req: 1, cuda graph: True, gen throughput (token/s): 2100.00, #queue-req: 1, 
[2026-03-02 10:15:03 DP0 TP3] Decode transfer failed for request rank=3 decode_req.req.rid='9fc62257c8194d659c81fff52e976f03' decode_req.req.bootstrap_room=3513979088676517362 with exception KVTransferError(bootstrap_room=3513979088676517362): Failed to get kvcache from prefill instance, it might be dead
[2026-03-02 10:15:03 DP0 TP2] Decode transfer failed for request rank=2 decode_req.req.rid='9fc62257c8194d659c81fff52e976f03' decode_req.req.bootstrap_room=3513979088676517362 with exception KVTransferError(bootstrap_room=3513979088676517362): Failed to get kvcache from prefill instance, it might be dead
[2026-03-02 10:15:04 DP0 TP3] Prefill transfer failed for request rank=3 req.rid='r2` + "\x1b[2J" + `' req.bootstrap_room=222
[2026-03-02 10:15:05 DP0 TP3] Context corruption detected: Request 5d0c1f2e (bootstrap_room=333) received metadata from bootstrap_room=444. Metadata buffer index: 17. This indicates metadata buffer index collision.
`

func TestLogsScanPDFailures(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decode.log")
	if err := os.WriteFile(path, []byte(logsPDFixture), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runLogsScan(t, []string{path}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"\ntransfer failures    3 (2 decode, 1 prefill) over 2 rooms\n",
		"\n  line 3       2026-03-02T10:15:03Z  decode rank 3 rid 9fc62257c8194d659c81fff52e976f03 room 3513979088676517362: KVTransferError(bootstrap_room=3513979088676517362): Failed to get kvcache from prefill instance, it might be dead\n",
		"\nmetadata corruptions 1 over 1 room\n",
		"\n  line 6       2026-03-02T10:15:05Z  rid 5d0c1f2e room 333 received room 444's metadata (buffer index 17)\n",
		"\npd decode queues     2 decode lines: peak #prealloc-req 4, peak #transfer-req 9, peak #retracted-req 1, peak pre-allocated usage 0.30\n",
		"\nspeculative          2 decode lines: accept len avg 2.50 (min 2.00), accept rate avg 0.62 (min 0.50)\n",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("text lacks %q:\n%s", w, out)
		}
	}
	if strings.ContainsRune(out, 0x1b) {
		t.Errorf("a rid from the log reached the terminal unquoted:\n%q", out)
	}

	// --limit bounds the listed lines, never the counts.
	out, _, _ = runLogsScan(t, []string{path, "--limit", "1"}, "")
	if !strings.Contains(out, "  … 2 more (--json lists up to 1000)\n") || strings.Contains(out, "line 4 ") {
		t.Errorf("--limit 1:\n%s", out)
	}

	out, _, err = runLogsScan(t, []string{path, "--json"}, "")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		TransferFailures       int64 `json:"transfer_failures"`
		TransferFailedRooms    int64 `json:"transfer_failed_rooms"`
		MetadataCorruptions    int64 `json:"metadata_corruptions"`
		MetadataCorruptionLine []struct {
			Rid      string `json:"rid"`
			Room     string `json:"bootstrap_room"`
			FromRoom string `json:"from_bootstrap_room"`
			Index    int    `json:"metadata_buffer_index"`
		} `json:"metadata_corruption_lines"`
		PD          map[string]float64 `json:"pd_decode"`
		Speculative map[string]float64 `json:"speculative"`
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if m.TransferFailures != 3 || m.TransferFailedRooms != 2 || m.MetadataCorruptions != 1 || len(m.MetadataCorruptionLine) != 1 ||
		m.MetadataCorruptionLine[0].Room != "333" || m.MetadataCorruptionLine[0].FromRoom != "444" || m.MetadataCorruptionLine[0].Index != 17 {
		t.Errorf("json counts: %+v", m)
	}
	if m.PD["peak_transfer_req"] != 9 || m.Speculative["avg_accept_len"] != 2.5 {
		t.Errorf("json pd %v speculative %v", m.PD, m.Speculative)
	}
	if !strings.Contains(out, `"bootstrap_room": "3513979088676517362"`) {
		t.Errorf("a 19-digit room is not kept exactly as a string:\n%s", out)
	}
}

// repro --server-log summarises the log with the same scanner: its JSON
// carries the PD failure counts (server_log), and its text names them.
func TestLogsPDFailuresInReproText(t *testing.T) {
	sum, err := logscan.ScanAll(strings.NewReader(logsPDFixture), "decode.log", logscan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := writeReproText(&b, reproJSON{HarnessResult: &repro.HarnessResult{}, ServerLog: sum}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "\nserver log: PD transfer failures 3 (2 rooms), metadata buffer collisions 1 (1 room)\n") {
		t.Errorf("repro text:\n%s", b.String())
	}
	js, err := json.Marshal(reproJSON{HarnessResult: &repro.HarnessResult{}, ServerLog: sum})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"transfer_failures":3`) || !strings.Contains(string(js), `"metadata_corruptions":1`) {
		t.Errorf("repro json server_log:\n%s", js)
	}
}
