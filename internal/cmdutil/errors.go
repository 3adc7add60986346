package cmdutil

import (
	"context"
	"errors"
	"fmt"
)

// Exit codes, one meaning each, shared by every command.
const (
	ExitOK      = 0 // success; for a check: nothing found
	ExitFinding = 1 // a check found evidence of corruption
	ExitUsage   = 2 // bad flags or arguments
	ExitInput   = 3 // unreadable or malformed input, or a runtime failure
	// ExitNoData: the input was read whole and is well-formed, but holds
	// none of the observations the command judges (a bundle recorded
	// without the instrument, a log without its lines). Neither a verdict (0
	// would vouch for a run nobody measured, 1 would accuse it) nor a broken
	// input (3: recording again the same way would answer nothing more). See
	// NoData.
	ExitNoData = 4
	// ExitInterrupted: the first SIGINT or SIGTERM stopped the command
	// (128 + SIGINT, as shells report it).
	ExitInterrupted = 130
)

// ExitError carries an exit code through the command tree to main.
type ExitError struct {
	Code int
	Err  error // may be nil for a silent exit (ExitFinding after a printed report)
	// failure: the command's own work failed (FailureError); an
	// interruption did not cause it.
	failure bool
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// FindingError is returned by a check command that printed its report and found
// corruption: main exits 1 without printing anything more.
var FindingError = &ExitError{Code: ExitFinding}

// UsageError marks err as a usage error (exit 2, usage printed).
func UsageError(format string, a ...any) error {
	return &ExitError{Code: ExitUsage, Err: fmt.Errorf(format, a...)}
}

// InputError marks err as an input error (exit 3).
func InputError(err error) error {
	if err == nil {
		return nil
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return err
	}
	return &ExitError{Code: ExitInput, Err: err}
}

// FailureError marks err as a failure of the command's own work that an
// interruption did not cause (a recording that hit a full disk while collect
// ran until Ctrl-C): exit 3 even when the command was also interrupted, so a
// script can tell it from a normal end (130).
func FailureError(err error) error {
	if err == nil {
		return nil
	}
	return &ExitError{Code: ExitInput, Err: err, failure: true}
}

// ExitCodeAfter is ExitCode for a command that was, or was not, interrupted
// by SIGINT or SIGTERM: an input error after the signal is a read the signal
// cut, however it was worded (130), unless it is a FailureError.
func ExitCodeAfter(err error, interrupted bool) int {
	code := ExitCode(err)
	var ee *ExitError
	if interrupted && code == ExitInput && !(errors.As(err, &ee) && ee.failure) {
		return ExitInterrupted
	}
	return code
}

// ExitCode maps an error returned by a command to the process exit code.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) && ee.Code != ExitInput {
		return ee.Code
	}
	if errors.Is(err, context.Canceled) {
		return ExitInterrupted
	}
	return ExitInput
}
