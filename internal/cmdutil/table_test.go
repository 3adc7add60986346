package cmdutil

import (
	"strings"
	"testing"
)

func TestWriteTable(t *testing.T) {
	rows := [][]string{{"ROOM", "CLASS", "BSUM"}, {"0", "warmup", "0x1556e08c93fd4137"},
		{"25089291072559105", "mismatch", "0x5bddf900a11d9b22"}, {"7", "free", ""}}
	want := "ROOM               CLASS     BSUM\n" +
		"0                  warmup    0x1556e08c93fd4137\n" +
		"25089291072559105  mismatch  0x5bddf900a11d9b22\n" +
		"7                  free\n"
	// Aligned in a pipe as on a terminal (64-bit hex misaligned tab stops).
	for _, tty := range []bool{false, true} {
		var b strings.Builder
		if err := WriteTable(&b, tty, rows); err != nil {
			t.Fatal(err)
		}
		if b.String() != want {
			t.Errorf("tty=%v:\n%s\nwant\n%s", tty, b.String(), want)
		}
	}
}

func TestCommas(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0", 7: "7", 999: "999", 1000: "1,000", 5120: "5,120", 123456: "123,456",
		1234567: "1,234,567", 1<<64 - 1: "18,446,744,073,709,551,615",
	} {
		if got := Commas(n); got != want {
			t.Errorf("Commas(%d) = %q, want %q", n, got, want)
		}
	}
}
