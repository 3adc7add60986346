package cmdutil

import (
	"strings"
	"testing"
)

func TestNoData(t *testing.T) {
	nd := NewNoData(InstrumentCanary, "a.log", 1, "line")
	want := "no data: a.log holds no canary.pages events or kv_canary violation lines (1 line read): record them with `kvcanary wrap` (the SGLang hooks, instrument canary) or `kvcanary sim run --record` (the twin), or pass an SGLang server log run with `--kv-canary log`"
	if nd.Message != want || nd.Unit != "lines" || nd.Status != StatusNoData {
		t.Fatalf("got %+v\nwant message %q", nd, want)
	}
	if got := NewNoData(InstrumentGraphDiff, "x", 12345, "event").Message; !strings.Contains(got, "(12,345 events read)") {
		t.Errorf("count: %q", got)
	}
	// An input name is untrusted text: quoted before it reaches a terminal.
	if got := NewNoData(InstrumentChecksum, "x\x1b[2Jy", 0, "event").Message; strings.ContainsRune(got, 0x1b) {
		t.Errorf("escape reached the message: %q", got)
	}
	var b strings.Builder
	nd.Detail = "why"
	if err := nd.Write(&b, false); err != nil || b.String() != want+"\nwhy\n" {
		t.Errorf("text %q, %v", b.String(), err)
	}
	b.Reset()
	if err := nd.Write(&b, true); err != nil || !strings.Contains(b.String(), `"status": "no-data"`) || !strings.Contains(b.String(), `"detail": "why"`) {
		t.Errorf("json %s, %v", b.String(), err)
	}
	if code := ExitCode(nd.Err()); code != ExitNoData || ExitNoData != 4 {
		t.Errorf("exit %d", code)
	}
}
