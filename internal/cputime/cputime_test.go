package cputime

import (
	"runtime"
	"testing"
	"time"
)

func TestProcessAdvancesWithWork(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" || runtime.GOOS == "js" || runtime.GOOS == "wasip1" {
		if Process() != 0 {
			t.Fatal("Process on a platform without getrusage must return 0")
		}
		t.Skip("no process CPU time on " + runtime.GOOS)
	}
	t0 := Process()
	if t0 <= 0 {
		t.Fatalf("Process() = %v at start, want > 0 (the test binary has run)", t0)
	}
	x := 0
	for start := Process(); Process()-start < 20*time.Millisecond; {
		for i := range 1 << 16 {
			x += i
		}
	}
	if t1 := Process(); t1-t0 < 20*time.Millisecond {
		t.Errorf("Process advanced %v over 20 ms of spinning (x=%d)", t1-t0, x)
	}
}
