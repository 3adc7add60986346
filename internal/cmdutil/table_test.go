package cmdutil

import (
	"strings"
	"testing"
)

func TestWriteTable(t *testing.T) {
	rows := [][]string{{"CLASS", "PAGES"}, {"expected-store", "3"}, {"free", "12,000"}}
	var pipe strings.Builder
	if err := WriteTable(&pipe, false, rows); err != nil {
		t.Fatal(err)
	}
	if want := "CLASS\tPAGES\nexpected-store\t3\nfree\t12,000\n"; pipe.String() != want {
		t.Errorf("pipe:\n%q\nwant\n%q", pipe.String(), want)
	}
	var tty strings.Builder
	if err := WriteTable(&tty, true, rows); err != nil {
		t.Fatal(err)
	}
	want := "CLASS           PAGES\n" +
		"expected-store  3\n" +
		"free            12,000\n"
	if tty.String() != want {
		t.Errorf("tty:\n%s\nwant\n%s", tty.String(), want)
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
