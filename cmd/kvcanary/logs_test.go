package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/repro"
	"github.com/kvcanary/kvcanary/runtime/logscan"
)

const logsFixture = `[2025-06-01 12:00:01 TP0] Prefill batch, #new-seq: 3, #new-token: 8192, #cached-token: 1024, token usage: 0.41, #running-req: 57, #queue-req: 9, 
[2025-06-01 12:00:02 TP0] Decode batch, #running-req: 60, #token: 87282, token usage: 1.00, cuda graph: True, gen throughput (token/s): 2529.33, #queue-req: 13, 
[2025-06-01 12:00:03 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.4100 -> 0.7000
[2025-06-01 12:00:04 TP0] kv_canary violation: launch_tag=HEAD_K_FULL fail_reason=position slot_idx=1 position=2 stored_token=3 expected_token=4 stored_chain_hash=0x1 expected_aux=0x2` + "\x1b[2J" + `
INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK
`

func runLogsScan(t *testing.T, args []string, stdin string) (string, string, error) {
	t.Helper()
	if !slices.ContainsFunc(args, func(a string) bool { return a == "--tz" || strings.HasPrefix(a, "--tz=") }) {
		// --tz defaults to the machine's zone: the expected times are UTC
		// whatever zone the test machine is in.
		args = append([]string{"--tz", "UTC"}, args...)
	}
	return runLogsScanDefaultTZ(t, args, stdin)
}

// runLogsScanDefaultTZ runs logs scan as given: without --tz, in this
// machine's zone.
func runLogsScanDefaultTZ(t *testing.T, args []string, stdin string) (string, string, error) {
	t.Helper()
	c := newTestCLI()
	c.In.WriteString(stdin)
	c.F.Now = func() time.Time { return time.Date(2025, 7, 1, 0, 0, 0, 0, time.UTC) }
	err := c.exec(NewCmdLogsScan(c.F, nil), args...)
	return c.Out.String(), c.ErrOut.String(), err
}

func TestLogsScanJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decode.log")
	if err := os.WriteFile(path, []byte(logsFixture), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runLogsScan(t, []string{path, "--json"}, "")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := map[string]float64{
		"lines": 5, "decode_batches": 1, "peak_running_req": 60, "peak_token_usage": 1, "retraction_events": 1,
		"retracted_reqs": 3, "canary_violations": 1, "checksum_mismatches": 0, "preemptions": 0, "unrecognized": 1,
	}
	for k, v := range want {
		got, ok := m[k].(float64)
		if !ok || got != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	if m["format"] != "sglang" {
		t.Errorf("format = %v", m["format"])
	}
	rs := m["retractions"].([]any)
	if len(rs) != 1 || rs[0].(map[string]any)["time"] != "2025-06-01T12:00:03Z" {
		t.Errorf("retractions = %v", rs)
	}
}

func TestLogsScanTextQuotesAndStdin(t *testing.T) {
	out, _, err := runLogsScan(t, []string{"-"}, logsFixture)
	if err != nil {
		t.Fatal(err)
	}
	assertGolden(t, "logs-scan-sglang", out, nil)
	wantContains(t, "output", out, "stdin: sglang log, 5 lines (1 unrecognized", "retractions          1 event, 3 requests retracted",
		"2025-06-01T12:00:03Z  retracted 3", "canary violations    1", `\x1b[2J`)
	if strings.Contains(out, "\x1b") {
		t.Error("raw escape sequence from the log reached the terminal")
	}
}

func TestLogsScanErrors(t *testing.T) {
	_, _, err := runLogsScan(t, []string{filepath.Join(t.TempDir(), "missing.log")}, "")
	if cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(err.Error(), "missing.log") {
		t.Errorf("missing file: %v (exit %d)", err, cmdutil.ExitCode(err))
	}
	_, _, err = runLogsScan(t, []string{"-", "--tz", "Mars/Olympus"}, "")
	if cmdutil.ExitCode(err) != cmdutil.ExitUsage {
		t.Errorf("bad tz: %v", err)
	}
	_, _, err = runLogsScan(t, []string{}, "")
	if cmdutil.ExitCode(err) != cmdutil.ExitUsage {
		t.Errorf("no args: %v", err)
	}
	// Binary garbage is an input error naming what it is, never a summary;
	// a stray garbage line inside a text log is counted, never fatal.
	_, _, err = runLogsScan(t, []string{"-", "--json"}, "\x00\x01\x02\n\xff\xfe\n")
	if cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(err.Error(), "stdin: binary data") {
		t.Errorf("garbage: %v", err)
	}
	out, _, err := runLogsScan(t, []string{"-", "--json"}, strings.Repeat("some log line of text\n", 20)+"\x00\x01\x02\n\xff\xfe\n")
	if err != nil || !strings.Contains(out, `"unrecognized": 22`) {
		t.Errorf("garbage line: %v %s", err, out)
	}
}

func TestLogsScanVLLMYear(t *testing.T) {
	log := "INFO 06-01 12:00:10 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 930.1 tokens/s, Running: 64 reqs, Waiting: 12 reqs, GPU KV cache usage: 99.8%, Prefix cache hit rate: 0.0%\n"
	out, _, err := runLogsScan(t, []string{"-", "--json", "--year", "2024"}, log)
	if err != nil || !strings.Contains(out, `"start": "2024-06-01T12:00:10Z"`) || !strings.Contains(out, `"peak_token_usage": 0.998`) {
		t.Errorf("%v %s", err, out)
	}
	out, _, _ = runLogsScan(t, []string{"-", "--json"}, log)
	if !strings.Contains(out, `"start": "2025-06-01T12:00:10Z"`) {
		t.Errorf("default year not from the injected clock: %s", out)
	}
}

// SGLang logs local time: --tz says which zone the timestamps are in, an
// offset or an IANA name, and the report states the zone it used.
func TestLogsScanTZ(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decode.log")
	if err := os.WriteFile(path, []byte(logsFixture), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tz, start, zone string
	}{
		{"+02:00", "2025-06-01T12:00:01+02:00", "UTC+02:00"},
		{"UTC-0700", "2025-06-01T12:00:01-07:00", "UTC-07:00"},
		{"Asia/Kolkata", "2025-06-01T12:00:01+05:30", "Asia/Kolkata (IST, UTC+05:30)"},
		{"UTC", "2025-06-01T12:00:01Z", "UTC"},
	} {
		out, _, err := runLogsScan(t, []string{path, "--json", "--tz", tc.tz}, "")
		if err != nil {
			t.Fatalf("--tz %s: %v", tc.tz, err)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if m["start"] != tc.start || m["time_zone"] != tc.zone {
			t.Errorf("--tz %s: start %v, time_zone %v; want %s, %s", tc.tz, m["start"], m["time_zone"], tc.start, tc.zone)
		}
		if _, ok := m["decode_batches"]; !ok {
			t.Errorf("--tz %s: the summary's keys are no longer at the top level: %s", tc.tz, out)
		}
	}
	out, _, err := runLogsScan(t, []string{path, "--tz", "+05:30"}, "")
	if err != nil || !strings.Contains(out, "timestamps read in   UTC+05:30 (--tz)") || !strings.Contains(out, "2025-06-01T12:00:03+05:30") {
		t.Errorf("text report does not state the zone: %v\n%s", err, out)
	}
	if _, _, err := runLogsScan(t, []string{path, "--tz", "+25:00"}, ""); err == nil || !strings.Contains(err.Error(), `"+25:00"`) {
		t.Errorf("bad offset: %v", err)
	}
	// The default is this machine's local zone, and it is stated.
	out, _, err = runLogsScanDefaultTZ(t, []string{path}, "")
	if err != nil || !strings.Contains(out, "timestamps read in   "+time.Local.String()+" (") {
		t.Errorf("default zone not stated as local: %v\n%s", err, out)
	}
}

// Negative --limit and --year are usage errors (issue 19 item 13): the
// error alone, without the usage (main adds the pointer to --help). --limit
// is checked as the flag is parsed (cmdutil.AddLimitFlag), so through the
// root command, whose flag errors are usage errors.
func TestLogsScanRejectsNegativeFlags(t *testing.T) {
	_, errOut, err := runLogsScan(t, []string{"-", "--year", "-2026"}, "x\n")
	if cmdutil.ExitCode(err) != cmdutil.ExitUsage || !strings.Contains(err.Error(), "--year") || strings.Contains(errOut, "Usage:") {
		t.Errorf("--year -2026: exit %d, %v", cmdutil.ExitCode(err), err)
	}
	for _, args := range [][]string{{"logs", "scan", "-", "--limit", "-1"}, {"checksum", "compare", "a", "b", "--limit", "-3"},
		{"canary", "report", "a", "--limit", "0"}, {"graphdiff", "report", "a", "--limit", "0"}} {
		code, _, errOut := runTest(t, args...)
		if code != cmdutil.ExitUsage || !strings.Contains(errOut, `for "--limit" flag: want `) || strings.Contains(errOut, "Usage:") {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
		}
	}
}

// logs scan finds the violation canary report finds on a line over 1 MiB
// (issue 19 item 13: logs scan skipped the line, canary report parsed its head).
func TestLongViolationLineFoundByBoth(t *testing.T) {
	v := "[2026-11-29 08:00:06 TP0] kv_canary violation: launch_tag=HEAD_K_FULL fail_reason=chain_hash slot_idx=1 position=2 stored_token=3 expected_token=4 stored_chain_hash=0x1 expected_aux=0x2 "
	path := filepath.Join(t.TempDir(), "decode.log")
	if err := os.WriteFile(path, []byte("[2026-11-29 08:00:05 TP0] Decode batch. #running-req: 1\n"+v+strings.Repeat("pad ", 1<<19)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := runLogsScan(t, []string{path, "--json"}, "")
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		CanaryViolations int64 `json:"canary_violations"`
		LongLines        int64 `json:"long_lines"`
	}
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.CanaryViolations != 1 || sum.LongLines != 1 {
		t.Errorf("logs scan: %d violations, %d long lines; want 1, 1", sum.CanaryViolations, sum.LongLines)
	}
	ios, _, _, _ := cmdutil.Test()
	err = canaryReportRun(&CanaryReportOptions{IO: ios, JSON: &cmdutil.JSONFlags{}, Path: path})
	if cmdutil.ExitCode(err) != cmdutil.ExitFinding {
		t.Errorf("canary report: exit %d (%v), want 1", cmdutil.ExitCode(err), err)
	}
}

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
	wantContains(t, "text", out,
		"\ntransfer failures    3 (2 decode, 1 prefill) over 2 rooms\n",
		"\n  line 3       2026-03-02T10:15:03Z  decode rank 3 rid 9fc62257c8194d659c81fff52e976f03 room 3513979088676517362: KVTransferError(bootstrap_room=3513979088676517362): Failed to get kvcache from prefill instance, it might be dead\n",
		"\nmetadata corruptions 1 over 1 room\n",
		"\n  line 6       2026-03-02T10:15:05Z  rid 5d0c1f2e room 333 received room 444's metadata (buffer index 17)\n",
		"\npd decode queues     2 decode lines: peak #prealloc-req 4, peak #transfer-req 9, peak #retracted-req 1, peak pre-allocated usage 0.30\n",
		"\nspeculative          2 decode lines: accept len avg 2.50 (min 2.00), accept rate avg 0.62 (min 0.50)\n",
	)
	if strings.ContainsRune(out, 0x1b) {
		t.Errorf("a rid from the log reached the terminal unquoted:\n%q", out)
	}

	// --limit bounds the listed lines, never the counts.
	out, _, _ = runLogsScan(t, []string{path, "--limit", "1"}, "")
	if !strings.Contains(out, "  … 2 more (--json lists up to 1000)\n") || strings.Contains(out, "line 4 ") {
		t.Errorf("--limit 1:\n%s", out)
	}
	// --limit 0 lists all that are kept, as in checksum compare.
	if all, _, _ := runLogsScan(t, []string{path, "--limit", "0"}, ""); strings.Contains(all, " more (--json") || !strings.Contains(all, "line 4 ") {
		t.Errorf("--limit 0:\n%s", all)
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
