package logscan

import (
	"strings"
	"testing"
)

// Issue 27 D18: an over-long line kept as evidence is cut to MaxSampleText
// bytes, saying how much was cut (before: logs scan printed 1 MiB of it).
func TestSampleTextCapped(t *testing.T) {
	long := "WARNING 06-01 12:00:21 [scheduler.py:1754] Sequence group 7 is preempted by PreemptionMode.RECOMPUTE mode because " +
		strings.Repeat("é", 2<<20) + "\n"
	s, err := ScanAll(strings.NewReader(long), "vllm.log", Options{Year: 2025})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.PreemptionLines) != 1 {
		t.Fatalf("preemption lines %+v", len(s.PreemptionLines))
	}
	text := s.PreemptionLines[0].Text
	if len(text) > MaxSampleText+64 || !strings.HasPrefix(text, "WARNING 06-01") || !strings.Contains(text, "more bytes)") {
		t.Fatalf("sample of an over-long line: %d bytes, ends %q", len(text), text[max(0, len(text)-40):])
	}
	if strings.ToValidUTF8(text, "?") != text {
		t.Fatal("the cut split a character")
	}
}
