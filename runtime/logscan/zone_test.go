package logscan

import (
	"strings"
	"testing"
	"time"
)

func TestParseZone(t *testing.T) {
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in     string
		offset int // seconds east of UTC at `at`
		desc   string
	}{
		{"", 0, ""}, // Local: checked below
		{"UTC", 0, "UTC"},
		{"z", 0, "UTC"},
		{"+02:00", 7200, "UTC+02:00"},
		{"-0700", -7 * 3600, "UTC-07:00"},
		{"+5", 5 * 3600, "UTC+05:00"},
		{"UTC+05:30", 5*3600 + 1800, "UTC+05:30"},
		{"GMT-03:00", -3 * 3600, "UTC-03:00"},
		{"Europe/Berlin", 7200, "Europe/Berlin (CEST, UTC+02:00)"},
	} {
		loc, err := ParseZone(tc.in)
		if err != nil {
			t.Errorf("ParseZone(%q): %v", tc.in, err)
			continue
		}
		if tc.in == "" {
			if loc != time.Local {
				t.Errorf("ParseZone(\"\") = %v, want Local", loc)
			}
			continue
		}
		if _, off := at.In(loc).Zone(); off != tc.offset {
			t.Errorf("ParseZone(%q) offset %d, want %d", tc.in, off, tc.offset)
		}
		if d := DescribeZone(loc, at); d != tc.desc {
			t.Errorf("DescribeZone(%q) = %q, want %q", tc.in, d, tc.desc)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"+15", "hours 0-14"},
		{"+02:7", "minutes"},
		{"+0x", "want ±HH"},
		{"Mars/Olympus", "IANA name"},
	} {
		if _, err := ParseZone(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.in) {
			t.Errorf("ParseZone(%q) = %v, want an error naming the input and %q", tc.in, err, tc.want)
		}
	}
}

// A zone moves the instants a log's local timestamps stand for.
func TestParserLocation(t *testing.T) {
	line := "[2025-06-01 12:00:02 TP0] Decode batch, #running-req: 1, #token: 10, token usage: 0.01, cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0, "
	loc, _ := ParseZone("+02:00")
	utc, zoned := NewParser(Options{}), NewParser(Options{Location: loc})
	var a, b Record
	utc.Parse([]byte(line), 1, &a)
	zoned.Parse([]byte(line), 1, &b)
	if a.TS == 0 || b.TS == 0 {
		t.Fatalf("no timestamp parsed: %d %d", a.TS, b.TS)
	}
	if a.TS-b.TS != int64(2*time.Hour) {
		t.Errorf("UTC %d vs +02:00 %d: want two hours apart", a.TS, b.TS)
	}
}
