package canary

import (
	"errors"
	"os"
	"strings"
	"testing"
	"testing/iotest"
)

func TestScanLog(t *testing.T) {
	f, err := os.Open("testdata/sglang-canary.log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := ScanLog(f, "sglang-canary.log", LogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Lines != 13 || s.Violations != 2 || s.Malformed != 1 || s.Other != 10 {
		t.Fatalf("lines %d violations %d malformed %d other %d", s.Lines, s.Violations, s.Malformed, s.Other)
	}
	if len(s.Errors) != 1 || !strings.HasPrefix(s.Errors[0], "sglang-canary.log:13: ") || !strings.Contains(s.Errors[0], "slot_idx") {
		t.Fatalf("errors %q", s.Errors)
	}
	first, second := s.Samples[0], s.Samples[1]
	if first.Line != 3 || first.Step != 5120 || first.SlotIdx != 4113 || first.LaunchTag != "HEAD_K_FULL" {
		t.Fatalf("first %+v", first)
	}
	if second.Line != 12 || second.Step != -1 || !second.IsWrite() || second.ExpectedAux != 13 {
		t.Fatalf("second %+v", second)
	}
	if s.ByReason["write_token"] != 1 || s.ByReason["chain_hash"] != 1 || s.ByReason["real_kv_hash"] != 1 || s.ByTag["SWEEP_K_FULL"] != 1 {
		t.Fatalf("by reason %v by tag %v", s.ByReason, s.ByTag)
	}
	fd := first.Finding()
	if fd.Analyzer != "canary" || fd.Severity != "error" || fd.Evidence["step"] != "5120" || fd.Evidence["line"] != "3" ||
		!strings.Contains(fd.Summary, "sglang-canary.log:3") {
		t.Fatalf("finding %+v", fd)
	}
	if !s.Findings() {
		t.Fatal("Findings false")
	}
}

func TestScanLogBounds(t *testing.T) {
	line := strings.TrimPrefix(sglangLine, "")
	in := strings.Repeat(line+"\n", 5) + strings.Repeat("x", 300) + sglangLine + "\n" + "no newline at end"
	s, err := ScanLog(strings.NewReader(in), "b.log", LogOptions{MaxSamples: 2, MaxLineBytes: 250})
	if err != nil {
		t.Fatal(err)
	}
	// The 300-byte prefix pushes the sixth violation past the line cap: it is
	// an oversized line whose head holds no summary.
	if s.Lines != 7 || s.Violations != 5 || len(s.Samples) != 2 || !s.Truncated || s.Oversized != 1 || s.Other != 2 {
		t.Fatalf("%+v", s)
	}
}

func TestScanLogReadError(t *testing.T) {
	r := iotest.TimeoutReader(strings.NewReader(strings.Repeat("a line\n", 100000)))
	s, err := ScanLog(r, "bad.log", LogOptions{})
	if err == nil || !errors.Is(err, iotest.ErrTimeout) || !strings.Contains(err.Error(), "read bad.log: line ") {
		t.Fatalf("err = %v", err)
	}
	if s == nil || s.Lines == 0 {
		t.Fatal("what was scanned before the error is lost")
	}
	empty, err := ScanLog(strings.NewReader(""), "e.log", LogOptions{})
	if err != nil || empty.Lines != 0 || empty.Findings() {
		t.Fatalf("empty: %+v %v", empty, err)
	}
}
