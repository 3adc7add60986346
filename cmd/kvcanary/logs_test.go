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
	for _, want := range []string{"stdin: sglang log, 5 lines (1 unrecognized", "retractions          1 event, 3 requests retracted",
		"2025-06-01T12:00:03Z  retracted 3", "canary violations    1", `\x1b[2J`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
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
