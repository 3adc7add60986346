package cmdutil

import (
	"context"
	"fmt"
	"testing"
)

// TestReportErrorSaysInterrupted: a command that Ctrl-C stopped printed Go's
// "context canceled" (issue 27 D18: sim run said "run workload: context
// canceled"); it says interrupted, keeping what was being done.
func TestReportErrorSaysInterrupted(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int
		want string
	}{
		{fmt.Errorf("run workload: %w", context.Canceled), ExitInterrupted, "kvcanary: run workload: interrupted\n"},
		{context.Canceled, ExitInterrupted, "kvcanary: interrupted\n"},
		// Not the signal's doing (exit 3): the words stay Go's.
		{fmt.Errorf("dial: %w", context.Canceled), ExitInput, "kvcanary: dial: context canceled\n"},
	} {
		io, _, _, errOut := Test()
		ReportError(io, tc.err, tc.code, ErrorContext{})
		if got := errOut.String(); got != tc.want {
			t.Errorf("ReportError(%v, %d) printed %q, want %q", tc.err, tc.code, got, tc.want)
		}
	}
}
