package cmdutil

import (
	"errors"
	"fmt"
	"testing"
)

func TestExitCodes(t *testing.T) {
	base := errors.New("boom")
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, ExitOK},
		{"plain error", base, ExitInput},
		{"input", InputError(base), ExitInput},
		{"usage", UsageError("bad flag %q", "x"), ExitUsage},
		{"finding", FindingError, ExitFinding},
		{"wrapped usage", fmt.Errorf("run: %w", UsageError("bad")), ExitUsage},
		{"input keeps an inner exit code", InputError(UsageError("bad")), ExitUsage},
	} {
		if got := ExitCode(tc.err); got != tc.want {
			t.Errorf("%s: ExitCode(%v) = %d, want %d", tc.name, tc.err, got, tc.want)
		}
	}
	if InputError(nil) != nil {
		t.Error("InputError(nil) != nil")
	}
	if err := InputError(base); !errors.Is(err, base) || err.Error() != "boom" {
		t.Errorf("InputError(boom) = %v, want it to wrap and print boom", err)
	}
	if FindingError.Error() != "exit 1" {
		t.Errorf("FindingError prints %q", FindingError.Error())
	}
}

func TestExitCodeAfterInterrupt(t *testing.T) {
	cut := InputError(errors.New("read bundle: file already closed"))
	failed := FailureError(errors.New("record bundle: no space left on device"))
	for _, tc := range []struct {
		err         error
		interrupted bool
		want        int
	}{
		{cut, false, ExitInput},
		{cut, true, ExitInterrupted}, // the read the signal cut
		{failed, true, ExitInput},    // a failure the signal did not cause
		{failed, false, ExitInput},
		{UsageError("x"), true, ExitUsage},
		{nil, true, ExitOK},
	} {
		if got := ExitCodeAfter(tc.err, tc.interrupted); got != tc.want {
			t.Errorf("ExitCodeAfter(%v, %v) = %d, want %d", tc.err, tc.interrupted, got, tc.want)
		}
	}
}
